package policy

import (
	"errors"
	"fmt"
)

// Guests are stopped by fuel rather than by wazero's WithCloseOnContextDone:
// that option makes every loop iteration exit to the host to check the
// context (about 24 ns), and Go's wasm port compiles every jump within a
// function as an iteration of the function's dispatch loop, which makes a
// Go-built policy several times slower. Instead, meter rewrites a module
// so that it pays for what it runs out of an i64 global, exported as
// kvmesh_fuel, which the host fills before each call. Code is cut into
// segments at every point control can reach other than by falling through
// (a function's start, a loop's start, an else, the end of a block or if:
// the targets of branches), and each segment subtracts, where it begins,
// the count of instructions up to the next such point; a path that leaves
// a segment early has paid for more than it ran, never for less. Bulk
// memory and table operations also subtract their length / 16 before they
// run. The fuel is checked where a function or a loop starts, after a call
// returns and before a bulk operation, and a guest whose fuel went
// negative traps there; every cycle of control passes one of those points
// and between two of them control moves forward within one function, so a
// call executes at most its budget of instructions, plus less than one
// function body's worth, however it loops or recurses. Within a function
// the fuel lives in a local, which the compiler keeps in a register: the
// global is read only at the function's start and after calls, and
// written before calls and where control leaves the function (see
// meterBody).

// fuelExport names the fuel global meter adds.
const fuelExport = "kvmesh_fuel"

// Section ids, and the order sections appear in (custom sections aside).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

var sectionRank = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13,
}

type section struct {
	id   byte
	body []byte
}

// meter returns wasm with fuel metering added (see above).
func meter(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 {
		return nil, errors.New("truncated module")
	}
	var sections []section
	r := &reader{b: wasm, off: 8}
	for !r.done() {
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, r.err
		}
		sections = append(sections, section{id, body})
	}

	var (
		paramCounts     []int // per type
		funcTypes       []uint32
		importedFuncs   int
		importedGlobals int
		definedGlobals  int
	)
	for _, s := range sections {
		r := &reader{b: s.body}
		switch s.id {
		case secType:
			for range r.u32() {
				if r.byte() != 0x60 {
					return nil, errors.New("type section holds a non-function type")
				}
				params := r.u32()
				r.bytes(int(params))
				r.bytes(int(r.u32()))
				paramCounts = append(paramCounts, int(params))
			}
		case secImport:
			for range r.u32() {
				r.bytes(int(r.u32()))
				r.bytes(int(r.u32()))
				switch kind := r.byte(); kind {
				case 0x00:
					r.u32()
					importedFuncs++
				case 0x01:
					r.byte()
					r.limits()
				case 0x02:
					r.limits()
				case 0x03:
					r.bytes(2)
					importedGlobals++
				default:
					return nil, fmt.Errorf("import of unknown kind %#x", kind)
				}
			}
		case secFunction:
			for range r.u32() {
				funcTypes = append(funcTypes, r.u32())
			}
		case secGlobal:
			definedGlobals = int(r.u32())
		case secExport:
			for range r.u32() {
				if string(r.bytes(int(r.u32()))) == fuelExport {
					return nil, fmt.Errorf("module already exports %s", fuelExport)
				}
				r.byte()
				r.u32()
			}
		}
		if r.err != nil {
			return nil, fmt.Errorf("section %d: %w", s.id, r.err)
		}
	}
	fuel := uint32(importedGlobals + definedGlobals)

	out := append([]byte(nil), wasm[:8]...)
	wroteGlobal, wroteExport := false, false
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	// The fuel global: mutable i64, initially 0.
	global := []byte{0x7E, 0x01, 0x42, 0x00, 0x0B}
	export := append(appendU32(nil, uint32(len(fuelExport))), fuelExport...)
	export = append(export, 0x03)
	export = appendU32(export, fuel)
	addMissing := func(before int) {
		if !wroteGlobal && before > sectionRank[secGlobal] {
			emit(secGlobal, append([]byte{1}, global...))
			wroteGlobal = true
		}
		if !wroteExport && before > sectionRank[secExport] {
			emit(secExport, append([]byte{1}, export...))
			wroteExport = true
		}
	}
	for _, s := range sections {
		if s.id != secCustom {
			addMissing(sectionRank[s.id])
		}
		switch s.id {
		case secGlobal:
			r := &reader{b: s.body}
			n := r.u32()
			body := appendU32(nil, n+1)
			body = append(body, s.body[r.off:]...)
			emit(secGlobal, append(body, global...))
			wroteGlobal = true
		case secExport:
			r := &reader{b: s.body}
			n := r.u32()
			body := appendU32(nil, n+1)
			body = append(body, s.body[r.off:]...)
			emit(secExport, append(body, export...))
			wroteExport = true
		case secCode:
			body, err := meterCode(s.body, fuel, func(i int) (int, error) {
				if i >= len(funcTypes) || int(funcTypes[i]) >= len(paramCounts) {
					return 0, fmt.Errorf("function %d has no type", importedFuncs+i)
				}
				return paramCounts[funcTypes[i]], nil
			})
			if err != nil {
				return nil, err
			}
			emit(secCode, body)
		default:
			emit(s.id, s.body)
		}
	}
	addMissing(len(sectionRank) + 1)
	return out, nil
}

// meterCode rewrites the code section's function bodies.
func meterCode(section []byte, fuel uint32, params func(int) (int, error)) ([]byte, error) {
	r := &reader{b: section}
	n := r.u32()
	out := appendU32(nil, n)
	for i := range int(n) {
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, r.err
		}
		p, err := params(i)
		if err != nil {
			return nil, err
		}
		metered, err := meterBody(body, fuel, p)
		if err != nil {
			return nil, fmt.Errorf("function body %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(metered)))
		out = append(out, metered...)
	}
	return out, nil
}

// instr is one decoded instruction of a body.
type instr struct {
	start, end int  // its bytes within the body
	op         byte // first opcode byte
	sub        uint32
	opensSeg   bool // a new segment begins right after it
	loop       bool // it is a loop: its segment checks the fuel
	bulk       bool // a bulk memory or table operation, metered by length
	free       bool // costs nothing: compiles to no work of its own
	call       bool // a call that returns here: the callee spends the same fuel
	exits      bool // control may leave the function here (return, a branch to the body's label, its end)
}

// meterBody meters one function body. The function keeps its fuel in a
// local (a register, where a global is a load and a store), loaded from
// the global at entry and after each call, and stored back before each
// call and wherever control may leave the function. Every segment
// subtracts its cost from the local; the fuel is checked, and the function
// traps if it went negative, where the function starts, where a loop
// starts, after a call returns and before a bulk operation. Between two
// checks control only moves forward within one function (a cycle passes a
// loop's start, a call the callee's start, a return the check after the
// call), so a call that spends its fuel stops within one function body's
// worth of instructions.
func meterBody(body []byte, fuel uint32, params int) ([]byte, error) {
	r := &reader{b: body}
	nlocals := 0
	groups := r.u32()
	for range groups {
		count := r.u32()
		r.byte()
		nlocals += int(count)
	}
	if r.err != nil {
		return nil, r.err
	}
	localDecls := body[:r.off]
	code := body[r.off:]
	instrs, bulk, err := decode(code)
	if err != nil {
		return nil, err
	}

	out := make([]byte, 0, len(body)+len(body)/2)
	// One more local, an i64, holds the fuel; one more, an i32, keeps a
	// bulk operation's length.
	left := uint32(params + nlocals)
	scratch := left + 1
	added := uint32(1)
	if bulk {
		added++
	}
	lr := &reader{b: localDecls}
	out = appendU32(out, lr.u32()+added)
	out = append(out, localDecls[lr.off:]...)
	out = append(out, 1, 0x7E)
	if bulk {
		out = append(out, 1, 0x7F)
	}

	load := func() {
		out = append(out, 0x23)
		out = appendU32(out, fuel)
		out = append(out, 0x21)
		out = appendU32(out, left)
	}
	store := func() {
		out = append(out, 0x20)
		out = appendU32(out, left)
		out = append(out, 0x24)
		out = appendU32(out, fuel)
	}
	// check traps, with the global up to date so that the host can tell
	// spent fuel from another trap, if the fuel went negative.
	check := func() {
		out = append(out, 0x20)
		out = appendU32(out, left)
		out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40)
		store()
		out = append(out, 0x00, 0x0B)
	}
	charge := func(cost int) {
		if cost == 0 {
			return
		}
		out = append(out, 0x20)
		out = appendU32(out, left)
		out = append(out, 0x42)
		out = appendS64(out, int64(cost))
		out = append(out, 0x7D, 0x21)
		out = appendU32(out, left)
	}
	// Segment costs: each segment is charged, in full, where it begins.
	segCost := func(from int) int {
		n := 0
		for j := from; j < len(instrs); j++ {
			if !instrs[j].free {
				n++
			}
			if instrs[j].opensSeg {
				break
			}
		}
		return n
	}
	load()
	charge(segCost(0))
	check()
	for j, in := range instrs {
		if in.bulk {
			out = append(out, 0x22)
			out = appendU32(out, scratch)
			out = append(out, 0x20)
			out = appendU32(out, left)
			out = append(out, 0x20)
			out = appendU32(out, scratch)
			out = append(out, 0xAD, 0x42, 4, 0x88, 0x7D, 0x21) // i64.extend_i32_u; >> 4; sub; set
			out = appendU32(out, left)
			check()
		}
		if in.call || in.exits {
			store()
		}
		out = append(out, code[in.start:in.end]...)
		if in.call {
			load()
			check()
		}
		if in.opensSeg && j+1 < len(instrs) {
			charge(segCost(j + 1))
			if in.loop {
				check()
			}
		}
	}
	return out, nil
}

// decode splits a function's expression into instructions, checking that
// each is one the metering understands, and reports whether any is a bulk
// operation.
func decode(code []byte) ([]instr, bool, error) {
	r := &reader{b: code}
	var out []instr
	bulk := false
	// The kinds of the open blocks; the function's body is a block.
	open := []byte{0x02}
	for len(open) > 0 {
		if r.done() {
			return nil, false, errors.New("body ends inside a block")
		}
		in := instr{start: r.off}
		in.op = r.byte()
		switch op := in.op; {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			r.blockType()
			open = append(open, op)
			in.opensSeg = op == 0x03 // a branch to a loop goes to its start
			in.loop = op == 0x03
		case op == 0x05: // else
			in.opensSeg = true
		case op == 0x0B: // end
			kind := open[len(open)-1]
			open = open[:len(open)-1]
			in.opensSeg = kind != 0x03 // a branch to a block or if goes past its end
			in.exits = len(open) == 0  // the end of the body returns
		case op == 0x0F: // return
			in.exits = true
		case op == 0x00 || op == 0x01 || op == 0x1A || op == 0x1B || op == 0xD1:
		case op == 0x0C || op == 0x0D: // br, br_if
			in.exits = r.u32() == uint32(len(open)-1) // to the body's label: a return
		case op == 0x0E: // br_table
			for range r.u32() + 1 {
				in.exits = in.exits || r.u32() == uint32(len(open)-1)
			}
		case op == 0x10: // call
			r.u32()
			in.call = true
		case op == 0x11: // call_indirect
			r.u32()
			r.u32()
			in.call = true
		case op == 0x12: // return_call
			r.u32()
			in.exits = true
		case op == 0x13: // return_call_indirect
			r.u32()
			r.u32()
			in.exits = true
		case op == 0xD2: // ref.func
			r.u32()
		case op == 0x1C: // select t*
			r.bytes(int(r.u32()))
		case op >= 0x20 && op <= 0x26: // locals, globals, table.get/set
			r.u32()
		case op >= 0x28 && op <= 0x3E: // loads and stores
			r.u32()
			r.u32()
		case op == 0x3F || op == 0x40: // memory.size, memory.grow
			r.u32()
		case op == 0x41, op == 0x42:
			r.leb()
		case op == 0x43:
			r.bytes(4)
		case op == 0x44:
			r.bytes(8)
		case op >= 0x45 && op <= 0xC4: // numeric
		case op == 0xD0: // ref.null
			r.byte()
		case op == 0xFC:
			in.sub = r.u32()
			switch in.sub {
			case 0, 1, 2, 3, 4, 5, 6, 7: // saturating truncations
			case 8: // memory.init
				r.u32()
				r.u32()
				in.bulk = true
			case 9, 13, 15, 16: // data.drop, elem.drop, table.grow, table.size
				r.u32()
			case 10, 12, 14: // memory.copy, table.init, table.copy
				r.u32()
				r.u32()
				in.bulk = true
			case 11, 17: // memory.fill, table.fill
				r.u32()
				in.bulk = true
			default:
				return nil, false, fmt.Errorf("instruction 0xfc %d is not supported by the policy sandbox", in.sub)
			}
		default:
			return nil, false, fmt.Errorf("instruction %#x (SIMD, atomics or another extension) is not supported by the policy sandbox", op)
		}
		if r.err != nil {
			return nil, false, r.err
		}
		in.end = r.off
		in.free = freeOps[in.op]
		bulk = bulk || in.bulk
		out = append(out, in)
	}
	if !r.done() {
		return nil, false, errors.New("bytes after the end of a function body")
	}
	return out, bulk, nil
}

// freeOps compile to register moves or nothing at all; they cost no fuel.
// Every other instruction costs one, so a loop iteration, which needs a
// branch, and a call cost at least one each.
var freeOps = map[byte]bool{
	0x01: true, // nop
	0x02: true, // block
	0x03: true, // loop
	0x05: true, // else
	0x0B: true, // end
	0x1A: true, // drop
	0x20: true, // local.get
	0x21: true, // local.set
	0x22: true, // local.tee
	0x41: true, // i32.const
	0x42: true, // i64.const
	0x43: true, // f32.const
	0x44: true, // f64.const
}

// reader decodes the binary format; the first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) done() bool { return r.off >= len(r.b) || r.err != nil }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		r.fail(errors.New("unexpected end of module"))
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || r.off+n > len(r.b) {
		r.fail(errors.New("unexpected end of module"))
		r.off = len(r.b)
		return nil
	}
	r.off += n
	return r.b[r.off-n : r.off]
}

// leb skips a LEB128 number of at most 10 bytes.
func (r *reader) leb() {
	for i := 0; i < 10; i++ {
		if r.byte()&0x80 == 0 {
			return
		}
	}
	r.fail(errors.New("LEB128 number too long"))
}

func (r *reader) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		b := r.byte()
		v |= uint32(b&0x7F) << shift
		if b&0x80 == 0 {
			return v
		}
	}
	r.fail(errors.New("LEB128 number too long"))
	return 0
}

func (r *reader) limits() {
	flags := r.byte()
	r.u32()
	if flags&1 != 0 {
		r.u32()
	}
}

// blockType skips a block type: empty, a value type or a type index.
func (r *reader) blockType() {
	if r.off < len(r.b) && (r.b[r.off] == 0x40 || r.b[r.off] >= 0x6F && r.b[r.off] <= 0x7F) {
		r.off++
		return
	}
	r.leb()
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
