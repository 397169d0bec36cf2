package store

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/policy"
)

const kib = 1 << 10

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newStore(t *testing.T, mem, disk uint64, dir string) *Store {
	t.Helper()
	if dir == "" && disk > 0 {
		dir = t.TempDir()
	}
	s, err := New(Config{MemCapacity: mem, DiskCapacity: disk, DiskDir: dir, MaxBlockSize: 1 << 20,
		Namespaces: []string{"default", "other"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func value(seed, size int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t *testing.T, s *Store, key string, v []byte, d policy.Durability) {
	t.Helper()
	if err := s.Put("", []byte(key), [][]byte{v}, PutOptions{Durability: d}); err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
}

func get(s *Store, key string) ([]byte, error) {
	size, err := s.Size("", []byte(key))
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	_, err = s.Get("", []byte(key), [][]byte{buf})
	return buf, err
}

func mustGet(t *testing.T, s *Store, key string, want []byte) {
	t.Helper()
	got, err := get(s, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %s: %d bytes differ from the %d put", key, len(got), len(want))
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	tests := []struct {
		name string
		size int
		src  func(v []byte) [][]byte
		dst  func(b []byte) [][]byte
	}{
		{"one buffer", 10000, func(v []byte) [][]byte { return [][]byte{v} }, func(b []byte) [][]byte { return [][]byte{b} }},
		{"scattered", 10000, func(v []byte) [][]byte { return [][]byte{v[:1], v[1:4097], v[4097:]} },
			func(b []byte) [][]byte { return [][]byte{b[:5000], {}, b[5000:]} }},
		{"empty value", 0, func(v []byte) [][]byte { return [][]byte{v} }, func(b []byte) [][]byte { return [][]byte{b} }},
		{"largest block", 1 << 20 / 2, func(v []byte) [][]byte { return [][]byte{v} }, func(b []byte) [][]byte { return [][]byte{b} }},
	}
	for i, tc := range tests {
		v := value(i, tc.size)
		key := []byte(tc.name)
		if err := s.Put("", key, tc.src(v), PutOptions{}); err != nil {
			t.Fatalf("%s: Put: %v", tc.name, err)
		}
		buf := make([]byte, tc.size)
		n, err := s.Get("default", key, tc.dst(buf))
		if err != nil || n != uint64(tc.size) || !bytes.Equal(buf, v) {
			t.Fatalf("%s: Get = %d, %v; equal %v", tc.name, n, err, bytes.Equal(buf, v))
		}
	}
}

func TestBadInputGetsItsCode(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	mustPut(t, s, "present", []byte("abc"), policy.DurableMemory)
	tests := []struct {
		name string
		op   func() error
		want Code
	}{
		{"empty key", func() error { return s.Put("", nil, [][]byte{{1}}, PutOptions{}) }, CodeInvalidKey},
		{"key over 512 bytes", func() error {
			return s.Put("", bytes.Repeat([]byte("k"), 513), [][]byte{{1}}, PutOptions{})
		}, CodeInvalidKey},
		{"value over the block limit", func() error {
			return s.Put("", []byte("big"), [][]byte{make([]byte, 1<<20+1)}, PutOptions{})
		}, CodeTooLarge},
		{"unknown namespace", func() error { return s.Put("nope", []byte("k"), [][]byte{{1}}, PutOptions{}) }, CodeUnknownNamespace},
		{"disk durability without a disk tier", func() error {
			return s.Put("", []byte("k"), [][]byte{{1}}, PutOptions{Durability: policy.DurableDisk})
		}, CodeUnavailable},
		{"missing key", func() error { _, err := get(s, "absent"); return err }, CodeNotFound},
		{"buffer too small", func() error { _, err := s.Get("", []byte("present"), [][]byte{make([]byte, 2)}); return err }, CodeBufferSize},
		{"buffer too large", func() error { _, err := s.Get("", []byte("present"), [][]byte{make([]byte, 4)}); return err }, CodeBufferSize},
		{"exist in unknown namespace", func() error { _, err := s.Exist("nope", [][]byte{[]byte("k")}); return err }, CodeUnknownNamespace},
		{"query with an empty key", func() error { _, err := s.Query("", [][]byte{[]byte("a"), nil}); return err }, CodeInvalidKey},
		{"unpin of an unpinned block", func() error { return s.Unpin("", []byte("present")) }, CodeInvalidArgument},
		{"token block size 0", func() error { _, err := s.Match("", []int32{1}, 0); return err }, CodeInvalidArgument},
	}
	for _, tc := range tests {
		if got := CodeOf(tc.op()); got != tc.want {
			t.Errorf("%s: code %v, want %v", tc.name, got, tc.want)
		}
	}
	mustGet(t, s, "present", []byte("abc")) // still serving
}

func TestExistQueryRemoveClear(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	for _, k := range []string{"a", "b", "d"} {
		mustPut(t, s, k, []byte(k), policy.DurableMemory)
	}
	s.Put("other", []byte("a"), [][]byte{[]byte("other-a")}, PutOptions{})
	ks := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	found, err := s.Exist("", ks)
	if err != nil || fmt.Sprint(found) != "[true true false true]" {
		t.Fatalf("Exist = %v, %v", found, err)
	}
	if n, _ := s.Query("", ks); n != 2 {
		t.Fatalf("Query = %d, want 2 (stops at the first miss)", n)
	}
	if err := s.Remove("", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("", []byte("a")); err != nil {
		t.Fatalf("removing a missing key: %v", err)
	}
	if n, _ := s.Query("", ks); n != 0 {
		t.Fatalf("Query after Remove = %d", n)
	}
	if n, err := s.Clear("default"); err != nil || n != 2 {
		t.Fatalf("Clear = %d, %v; want 2", n, err)
	}
	if found, _ := s.Exist("other", ks[:1]); !found[0] {
		t.Fatal("Clear of one namespace removed another's block")
	}
	if st := s.Stat(); st.Blocks != 1 || st.Tiers[0].UsedBytes != 4*kib {
		t.Fatalf("after Clear: %d blocks, %d bytes used", st.Blocks, st.Tiers[0].UsedBytes)
	}
}

func TestReplaceKeepsOnlyTheNewest(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 1<<20, "")
	mustPut(t, s, "k", value(1, 5000), policy.DurableDisk)
	mustPut(t, s, "k", value(2, 7000), policy.DurableDisk)
	mustGet(t, s, "k", value(2, 7000))
	st := s.Stat()
	if st.Blocks != 1 || st.Tiers[1].Blocks != 1 {
		t.Fatalf("after replace: %d blocks, %d on disk", st.Blocks, st.Tiers[1].Blocks)
	}
	files, _ := filepath.Glob(filepath.Join(s.disk.Root(), "*", "*.blk"))
	if len(files) != 1 {
		t.Fatalf("%d block files after replace, want 1", len(files))
	}
}

// Memory evicts least recently used first, demoting to disk; disk evicts
// to make room and the block is then gone.
func TestEvictionDemotesThenDrops(t *testing.T) {
	t.Parallel()
	s := newStore(t, 64*kib, 80*kib, "")
	for i := 0; i < 4; i++ { // 4 × 16 KiB fills memory
		mustPut(t, s, fmt.Sprint(i), value(i, 16*kib), policy.DurableMemory)
	}
	mustGet(t, s, "0", value(0, 16*kib)) // 0 is now the most recent
	mustPut(t, s, "4", value(4, 16*kib), policy.DurableMemory)

	st := s.Stat()
	if st.Demotions != 1 || st.Tiers[1].Blocks != 1 {
		t.Fatalf("demotions %d, disk blocks %d; want one demotion", st.Demotions, st.Tiers[1].Blocks)
	}
	if found, _ := s.Exist("", [][]byte{[]byte("1")}); !found[0] {
		t.Fatal("the demoted block is gone")
	}
	mustGet(t, s, "1", value(1, 16*kib)) // served from disk
	if st := s.Stat(); st.Tiers[1].Hits != 1 {
		t.Fatalf("disk hits %d, want 1", st.Tiers[1].Hits)
	}
	// Each block file is 16 KiB plus a header, so 80 KiB of disk holds 4.
	for i := 5; i < 12; i++ {
		mustPut(t, s, fmt.Sprint(i), value(i, 16*kib), policy.DurableMemory)
	}
	st = s.Stat()
	if st.Tiers[1].UsedBytes > 80*kib || st.Tiers[1].Evictions == 0 {
		t.Fatalf("disk used %d of %d with %d evictions", st.Tiers[1].UsedBytes, 80*kib, st.Tiers[1].Evictions)
	}
	if st.Tiers[0].UsedBytes > 64*kib {
		t.Fatalf("memory used %d of %d", st.Tiers[0].UsedBytes, 64*kib)
	}
	if _, err := get(s, "2"); CodeOf(err) != CodeNotFound {
		t.Fatalf("oldest block: %v, want it evicted from both tiers", err)
	}
}

func TestPinnedAndLeasedBlocksStay(t *testing.T) {
	t.Parallel()
	s := newStore(t, 48*kib, 0, "")
	mustPut(t, s, "pinned", value(1, 16*kib), policy.DurableMemory)
	if err := s.Pin("", []byte("pinned")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "leased", value(2, 16*kib), policy.DurableMemory)
	leased, _, err := s.lease("", []byte("leased"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		mustPut(t, s, fmt.Sprint("filler", i), value(i, 16*kib), policy.DurableMemory)
	}
	mustGet(t, s, "pinned", value(1, 16*kib))
	if found, _ := s.Exist("", [][]byte{[]byte("leased")}); !found[0] {
		t.Fatal("a leased block was evicted")
	}
	// Only one page-run is evictable; a block needing two finds no room.
	if err := s.Put("", []byte("big"), [][]byte{make([]byte, 32*kib)}, PutOptions{}); CodeOf(err) != CodeNoSpace {
		t.Fatalf("Put with memory pinned: %v, want NO_SPACE", err)
	}
	s.mu.Lock()
	s.unlease(leased)
	s.mu.Unlock()
	s.Unpin("", []byte("pinned"))
	if err := s.Put("", []byte("big"), [][]byte{make([]byte, 32*kib)}, PutOptions{}); err != nil {
		t.Fatalf("Put after unpin: %v", err)
	}
}

// A block being read and replaced at once keeps its bytes for the reader.
func TestRetiredBlockOutlivesItsLease(t *testing.T) {
	t.Parallel()
	s := newStore(t, 32*kib, 0, "")
	old := value(1, 16*kib)
	mustPut(t, s, "k", old, policy.DurableMemory)
	b, _, _ := s.lease("", []byte("k"))
	mustPut(t, s, "k", value(2, 16*kib), policy.DurableMemory)
	if free := s.arena.FreeBytes(); free != 0 {
		t.Fatalf("%d bytes free: the retired block's pages were released while leased", free)
	}
	buf := make([]byte, 16*kib)
	s.arena.ReadVec(b.mem, [][]byte{buf})
	if !bytes.Equal(buf, old) {
		t.Fatal("leased bytes changed")
	}
	s.mu.Lock()
	s.unlease(b)
	s.mu.Unlock()
	if free := s.arena.FreeBytes(); free != 16*kib {
		t.Fatalf("%d bytes free: pages not returned with the last lease", free)
	}
	mustGet(t, s, "k", value(2, 16*kib))
}

func TestCorruptBlockIsDroppedAndCounted(t *testing.T) {
	t.Parallel()
	s := newStore(t, 64*kib, 1<<20, "")
	mustPut(t, s, "k", value(1, 16*kib), policy.DurableDisk)
	// Push k out of memory so the next read goes to disk.
	for i := 0; i < 4; i++ {
		mustPut(t, s, fmt.Sprint(i), value(i, 16*kib), policy.DurableMemory)
	}
	files, _ := filepath.Glob(filepath.Join(s.disk.Root(), "*", "*.blk"))
	var damaged bool
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if bytes.Contains(data[:200], []byte("default")) && bytes.Contains(data[:200], []byte("k")) && len(data) > 16*kib {
			data[len(data)-1] ^= 0xff
			os.WriteFile(f, data, 0o644)
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("block file not found")
	}
	if _, err := get(s, "k"); CodeOf(err) != CodeCorrupt {
		t.Fatalf("read of a damaged block: %v, want CORRUPT", err)
	}
	if _, err := get(s, "k"); CodeOf(err) != CodeNotFound {
		t.Fatalf("second read: %v, want NOT_FOUND (dropped)", err)
	}
	if st := s.Stat(); st.CorruptDropped != 1 {
		t.Fatalf("corrupt count %d, want 1", st.CorruptDropped)
	}
}

func TestRecoveryAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newStore(t, 1<<20, 1<<20, dir)
	mustPut(t, s, "durable", value(1, 9000), policy.DurableDisk)
	mustPut(t, s, "memory-only", value(2, 9000), policy.DurableMemory)
	s.Put("", []byte("child"), [][]byte{value(3, 100)}, PutOptions{Durability: policy.DurableDisk, Parent: []byte("durable")})
	s.Close()

	// Damage nothing, but leave a torn temporary file behind as a crash would.
	torn := filepath.Join(dir, "ff", "torn.blk.1.tmp")
	os.MkdirAll(filepath.Dir(torn), 0o755)
	os.WriteFile(torn, []byte("half a block"), 0o644)

	s2 := newStore(t, 1<<20, 1<<20, dir)
	mustGet(t, s2, "durable", value(1, 9000))
	mustGet(t, s2, "child", value(3, 100))
	if _, err := get(s2, "memory-only"); CodeOf(err) != CodeNotFound {
		t.Fatalf("memory-only block after restart: %v", err)
	}
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Fatal("torn temporary file survived start-up")
	}
	s2.mu.Lock()
	child, parent := s2.blocks[indexKey("default", []byte("child"))], s2.blocks[indexKey("default", []byte("durable"))]
	s2.mu.Unlock()
	if child.parentID != parent.id {
		t.Fatal("parent link not recovered")
	}
}

func TestRecoveryDropsCorruptFilesAndShrinksToCapacity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newStore(t, 1<<20, 1<<20, dir)
	for i := 0; i < 8; i++ {
		mustPut(t, s, fmt.Sprint(i), value(i, 12*kib), policy.DurableDisk)
		time.Sleep(2 * time.Millisecond) // distinct mtimes order the recovered LRU
	}
	s.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.blk"))
	os.Truncate(files[0], 100)

	s2 := newStore(t, 1<<20, 64*kib, dir) // room for 3 of the 7 intact blocks
	st := s2.Stat()
	if st.CorruptDropped != 1 {
		t.Fatalf("corrupt dropped %d, want 1", st.CorruptDropped)
	}
	if st.Tiers[1].UsedBytes > 64*kib || st.Tiers[1].Blocks == 0 {
		t.Fatalf("recovered %d blocks in %d bytes of a %d-byte disk", st.Tiers[1].Blocks, st.Tiers[1].UsedBytes, 64*kib)
	}
	if _, err := get(s2, "7"); err != nil && CodeOf(err) != CodeNotFound {
		t.Fatal(err)
	}
	if found, _ := s2.Exist("", [][]byte{[]byte("0")}); found[0] && st.Tiers[1].Blocks < 7 {
		t.Fatal("shrinking kept the oldest block")
	}
}

func TestTokenAPI(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1<<20, 0, "")
	tokens := make([]int32, 40) // 2 full blocks of 16 and a tail of 8
	for i := range tokens {
		tokens[i] = int32(i * 3)
	}
	blocks := [][][]byte{{value(1, 100)}, {value(2, 100)}, {value(3, 50)}}
	rs, err := s.WriteTokens("", tokens, 16, blocks, policy.DurableMemory)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil || r.Value() != int64(len(blocks[i][0])) {
			t.Fatalf("block %d: %v", i, r.Err)
		}
	}
	if n, _ := s.Match("", tokens, 16); n != 3 {
		t.Fatalf("Match = %d, want 3", n)
	}
	if n, _ := s.Match("", tokens[:32], 16); n != 2 {
		t.Fatalf("Match of the full-block prefix = %d, want 2", n)
	}
	other := append([]int32{99}, tokens[1:]...)
	if n, _ := s.Match("", other, 16); n != 0 {
		t.Fatalf("Match of a different first block = %d, want 0", n)
	}
	dsts := [][][]byte{{make([]byte, 100)}, {make([]byte, 100)}, {make([]byte, 50)}}
	rs, _ = s.ReadTokens("", tokens, 16, dsts)
	for i := range rs {
		if rs[i].Err != nil || !bytes.Equal(dsts[i][0], blocks[i][0]) {
			t.Fatalf("ReadTokens block %d: %v", i, rs[i].Err)
		}
	}
	if _, err := s.WriteTokens("", tokens, 16, blocks[:2], policy.DurableMemory); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("WriteTokens with too few blocks: %v", err)
	}
	s.mu.Lock()
	tail := s.blocks[indexKey("default", mustChain(t, tokens)[2])]
	s.mu.Unlock()
	if tail.tokens != 8 || tail.chainPos != 2 || tail.parentID == 0 {
		t.Fatalf("tail metadata: tokens %d pos %d parent %d", tail.tokens, tail.chainPos, tail.parentID)
	}
}

func mustChain(t *testing.T, tokens []int32) [][]byte {
	ks, err := (&Store{nsSet: map[string]bool{"default": true}}).ChainKeys("", tokens, 16)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestQueryWarmsDiskBlocks(t *testing.T) {
	t.Parallel()
	s := newStore(t, 64*kib, 1<<20, "")
	mustPut(t, s, "a", value(1, 16*kib), policy.DurableDisk)
	for i := 0; i < 4; i++ {
		mustPut(t, s, fmt.Sprint(i), value(i, 16*kib), policy.DurableMemory)
	}
	s.Remove("", []byte("3")) // leave room so warming evicts nothing
	if n, _ := s.Query("", [][]byte{[]byte("a")}); n != 1 {
		t.Fatal("a is not found")
	}
	waitFor(t, func() bool { return s.Stat().Prefetched == 1 })
	before := s.Stat().Tiers[0].Hits
	mustGet(t, s, "a", value(1, 16*kib))
	if s.Stat().Tiers[0].Hits != before+1 {
		t.Fatal("the warmed block was not read from memory")
	}
}

// badEviction names blocks that do not exist; the store must still make room.
type badEviction struct{}

func (badEviction) Observe([]policy.Event) {}
func (badEviction) Victims(dst []uint64, max int) []uint64 {
	for i := 0; i < max; i++ {
		dst = append(dst, 1<<60+uint64(i))
	}
	return dst
}

func TestNonsenseVictimsStillMakeRoom(t *testing.T) {
	t.Parallel()
	s := newStore(t, 32*kib, 0, "")
	s.SetEviction(policy.TierMemory, badEviction{})
	for i := 0; i < 6; i++ {
		mustPut(t, s, fmt.Sprint(i), value(i, 16*kib), policy.DurableMemory)
	}
	mustGet(t, s, "5", value(5, 16*kib))
}

func TestConcurrentOperations(t *testing.T) {
	t.Parallel()
	s := newStore(t, 256*kib, 512*kib, "")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 300; i++ {
				k := fmt.Sprint(r.IntN(40))
				switch r.IntN(4) {
				case 0, 1:
					// A value's content is a function of its key, so any
					// version read back can be checked.
					v := value(int(k[0])*1000+len(k), 8*kib+int(k[0]))
					if err := s.Put("", []byte(k), [][]byte{v}, PutOptions{Durability: policy.Durability(r.IntN(2))}); err != nil {
						errs <- err
						return
					}
				case 2:
					got, err := get(s, k)
					if err == nil && !bytes.Equal(got, value(int(k[0])*1000+len(k), 8*kib+int(k[0]))) {
						errs <- fmt.Errorf("key %s read wrong bytes", k)
						return
					}
				case 3:
					s.Remove("", []byte(k))
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !strings.Contains(err.Error(), "NOT_FOUND") && CodeOf(err) != CodeBufferSize {
			t.Fatal(err)
		}
	}
	st := s.Stat()
	if st.Tiers[0].UsedBytes > 256*kib || st.Tiers[1].UsedBytes > 512*kib {
		t.Fatalf("over capacity: %+v", st.Tiers)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
