package mempool

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syncBuf is a log sink the server goroutines and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type env struct {
	reg  *Registry
	log  *syncBuf
	path string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{reg: NewRegistry(), log: &syncBuf{}, path: filepath.Join(t.TempDir(), "mempool.sock")}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: e.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := Serve(ln, e.reg, slog.New(slog.NewTextHandler(e.log, nil)))
	t.Cleanup(srv.Close)
	return e
}

func (e *env) dial(t *testing.T) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: e.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func memfd(t *testing.T, size int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	return fd
}

func registration(magic uint64, nameLen uint32, name string) []byte {
	msg := binary.LittleEndian.AppendUint64(nil, magic)
	msg = binary.LittleEndian.AppendUint32(msg, nameLen)
	return append(msg, name...)
}

// register sends a well-formed registration and returns the pool id.
func register(t *testing.T, c *net.UnixConn, name string, fd int) uint32 {
	t.Helper()
	if _, _, err := c.WriteMsgUnix(registration(Magic, uint32(len(name)), name), unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	var reply [4]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		t.Fatalf("no pool id: %v", err)
	}
	return binary.LittleEndian.Uint32(reply[:])
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Pools are numbered 1, 2, 3 across connections, map the engine's bytes
// both ways, and go away when their connection closes.
func TestRegisterShareAndUnregister(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fd := memfd(t, 1<<20)
	engine, err := unix.Mmap(fd, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(engine)
	c1 := e.dial(t)
	if id := register(t, c1, "first", fd); id != 1 {
		t.Fatalf("first pool id %d, want 1", id)
	}
	c2 := e.dial(t)
	if id := register(t, c2, "second", memfd(t, 4096)); id != 2 {
		t.Fatalf("second pool id %d, want 2", id)
	}
	if id := register(t, c2, "third, same connection", memfd(t, 4096)); id != 3 {
		t.Fatalf("third pool id %d, want 3", id)
	}

	p, err := e.reg.Acquire(1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Size() != 1<<20 || p.Name != "first" {
		t.Fatalf("pool %q of %d bytes", p.Name, p.Size())
	}
	copy(engine[100:], "from the engine")
	span, _ := p.Span(100, 15)
	if string(span) != "from the engine" {
		t.Fatalf("agent sees %q", span)
	}
	span, _ = p.Span(5000, 9)
	copy(span, "the agent")
	if string(engine[5000:5009]) != "the agent" {
		t.Fatalf("engine sees %q", engine[5000:5009])
	}
	p.Release()

	c2.Close()
	waitFor(t, "pools 2 and 3 to go", func() bool { return e.reg.Len() == 1 })
	for _, id := range []uint32{2, 3, 0, 99} {
		if _, err := e.reg.Acquire(id); err != ErrUnknownPool {
			t.Fatalf("Acquire(%d) after close: %v", id, err)
		}
	}
}

// A malformed registration closes the connection, logs why, and registers
// nothing.
func TestMalformedRegistration(t *testing.T) {
	t.Parallel()
	file, err := os.CreateTemp(t.TempDir(), "not-a-memfd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { file.Close() }) // not defer: the subtests run after return
	file.Truncate(4096)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close(); pw.Close() })

	cases := []struct {
		name string
		msg  []byte
		fds  func(t *testing.T) []int
		log  string
	}{
		{"bad magic", registration(0x8DF6FBFE, 4, "pool"), func(t *testing.T) []int { return []int{memfd(t, 4096)} }, "bad magic"},
		{"truncated name", registration(Magic, 10, "pool"), func(t *testing.T) []int { return []int{memfd(t, 4096)} }, "name length 10"},
		{"short header", registration(Magic, 4, "")[:9], func(t *testing.T) []int { return []int{memfd(t, 4096)} }, "shorter than"},
		{"name too long", registration(Magic, MaxNameLen+1, ""), func(t *testing.T) []int { return []int{memfd(t, 4096)} }, "exceeds"},
		{"no fd", registration(Magic, 4, "pool"), func(*testing.T) []int { return nil }, "0 descriptors"},
		{"two fds", registration(Magic, 4, "pool"), func(t *testing.T) []int { return []int{memfd(t, 4096), memfd(t, 4096)} }, "2 descriptors"},
		{"three fds", registration(Magic, 4, "pool"), func(t *testing.T) []int { return []int{memfd(t, 4096), memfd(t, 4096), memfd(t, 4096)} }, "more than one descriptor"},
		{"regular file", registration(Magic, 4, "pool"), func(*testing.T) []int { return []int{int(file.Fd())} }, "not a memfd"},
		{"pipe", registration(Magic, 4, "pool"), func(*testing.T) []int { return []int{int(pr.Fd())} }, "not a memfd"},
		{"empty memfd", registration(Magic, 4, "pool"), func(t *testing.T) []int { return []int{memfd(t, 0)} }, "size 0"},
		{"name not UTF-8", registration(Magic, 2, "\xff\xfe"), func(t *testing.T) []int { return []int{memfd(t, 4096)} }, "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := e.dial(t)
			var oob []byte
			if fds := tc.fds(t); len(fds) > 0 {
				oob = unix.UnixRights(fds...)
			}
			if _, _, err := c.WriteMsgUnix(tc.msg, oob, nil); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 4)); err != io.EOF {
				t.Fatalf("want the connection closed, got %d bytes, %v", n, err)
			}
			if e.reg.Len() != 0 {
				t.Fatal("a malformed registration left a pool")
			}
			waitFor(t, "the log line", func() bool {
				return strings.Contains(e.log.String(), "malformed registration") && strings.Contains(e.log.String(), tc.log)
			})
		})
	}
}

// Unregistering waits for requests holding the pool: the mapping is never
// pulled from under a copy.
func TestUnregisterWaitsForUsers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := e.dial(t)
	id := register(t, c, "busy", memfd(t, 8192))
	p, err := e.reg.Acquire(id)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitFor(t, "the pool to leave the registry", func() bool { return e.reg.Len() == 0 })
	if _, err := e.reg.Acquire(id); err != ErrUnknownPool {
		t.Fatalf("new request on a closing pool: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // give an eager unmap the chance to happen
	if strings.Contains(e.log.String(), "pool unregistered") {
		t.Fatal("pool unmapped while a request held it")
	}
	span, err := p.Span(0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	span[8191] = 1 // would fault if unmapped
	p.Release()
	waitFor(t, "the unmap", func() bool { return strings.Contains(e.log.String(), "pool unregistered") })
}

func TestSpanBounds(t *testing.T) {
	t.Parallel()
	p := &Pool{mem: make([]byte, 4096)}
	cases := []struct {
		name    string
		off, n  uint64
		wantErr bool
	}{
		{"whole pool", 0, 4096, false},
		{"empty at the end", 4096, 0, false},
		{"last byte", 4095, 1, false},
		{"one past the end", 4095, 2, true},
		{"offset past the end", 4097, 0, true},
		{"length past the end", 0, 4097, true},
		{"offset near 2^64", math.MaxUint64 - 10, 5, true},
		{"offset+length overflows", 100, math.MaxUint64 - 50, true},
		{"both huge", math.MaxUint64, math.MaxUint64, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := p.Span(tc.off, tc.n)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Span(%d, %d): %v", tc.off, tc.n, err)
			}
			if err == nil && (uint64(len(b)) != tc.n || uint64(cap(b)) != tc.n) {
				t.Fatalf("Span(%d, %d) is %d bytes (cap %d)", tc.off, tc.n, len(b), cap(b))
			}
		})
	}
}
