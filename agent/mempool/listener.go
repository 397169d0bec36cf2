package mempool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Magic opens every registration: 8 bytes, little-endian, as SGLang HiCache's
// `rpc` backend sends it.
const Magic uint64 = 0x8DF6FBFD

// MaxNameLen bounds a pool's name so one read holds a whole registration.
const MaxNameLen = 4096

const headerLen = 8 + 4

// Server accepts pool registrations on a Unix socket. Each registration is
// one message: magic, u32 LE name length, the name, and exactly one memfd
// passed with SCM_RIGHTS. The reply is the u32 LE pool id. The pools a
// connection registered live until it closes. Anything malformed closes the
// connection, with a log line.
type Server struct {
	reg   *Registry
	log   *slog.Logger
	ln    *net.UnixListener
	mu    sync.Mutex
	conns map[*net.UnixConn]struct{}
	wg    sync.WaitGroup
}

// Serve accepts registrations on ln until Close.
func Serve(ln *net.UnixListener, reg *Registry, log *slog.Logger) *Server {
	s := &Server{reg: reg, log: log, ln: ln, conns: make(map[*net.UnixConn]struct{})}
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("mempool socket stopped", "err", err)
			}
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// Close stops accepting, closes every connection and unmaps every pool,
// waiting for requests that use them.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// serve handles one connection: registrations until EOF or a malformed one.
func (s *Server) serve(c *net.UnixConn) {
	defer s.wg.Done()
	var pools []*Pool
	defer func() {
		c.Close()
		for _, p := range pools {
			s.reg.remove(p)
			s.log.Info("pool unregistered", "pool_id", p.ID, "name", p.Name)
		}
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	for {
		name, mem, sealed, err := readRegistration(c)
		if err == errEOF {
			return
		}
		if err != nil {
			s.log.Warn("mempool: malformed registration; closing the connection", "err", err)
			return
		}
		p := s.reg.add(name, mem, sealed)
		pools = append(pools, p)
		var reply [4]byte
		binary.LittleEndian.PutUint32(reply[:], p.ID)
		if _, err := c.Write(reply[:]); err != nil {
			s.log.Warn("mempool: reply failed; closing the connection", "err", err)
			return
		}
		s.log.Info("pool registered", "pool_id", p.ID, "name", name, "bytes", len(mem))
	}
}

var errEOF = errors.New("connection closed")

// readRegistration reads one registration message and maps its memfd,
// reporting whether the memfd is sealed against shrinking. Any descriptor
// received is closed before it returns: the mapping outlives it.
func readRegistration(c *net.UnixConn) (string, []byte, bool, error) {
	buf := make([]byte, headerLen+MaxNameLen)
	// Room for two descriptors, so that a second one is seen and refused
	// rather than silently dropped.
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	fds, fdErr := parseFDs(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	switch {
	case n == 0 && oobn == 0:
		return "", nil, false, errEOF
	case err != nil:
		return "", nil, false, err
	case fdErr != nil:
		return "", nil, false, fdErr
	case flags&unix.MSG_CTRUNC != 0:
		return "", nil, false, errors.New("more than one descriptor")
	case n < headerLen:
		return "", nil, false, fmt.Errorf("%d-byte message, shorter than the %d-byte header", n, headerLen)
	case binary.LittleEndian.Uint64(buf) != Magic:
		return "", nil, false, fmt.Errorf("bad magic %#x", binary.LittleEndian.Uint64(buf))
	}
	nameLen := uint64(binary.LittleEndian.Uint32(buf[8:]))
	if nameLen > MaxNameLen {
		return "", nil, false, fmt.Errorf("name of %d bytes exceeds %d", nameLen, MaxNameLen)
	}
	if uint64(n) != headerLen+nameLen {
		return "", nil, false, fmt.Errorf("name length %d but %d bytes follow the header", nameLen, n-headerLen)
	}
	name := string(buf[headerLen:n])
	if !utf8.ValidString(name) {
		return "", nil, false, errors.New("pool name is not UTF-8")
	}
	if len(fds) != 1 {
		return "", nil, false, fmt.Errorf("%d descriptors, want exactly one memfd", len(fds))
	}
	mem, sealed, err := mapMemfd(fds[0])
	return name, mem, sealed, err
}

func parseFDs(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue // not SCM_RIGHTS (credentials): not ours to use
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// mapMemfd maps the whole of a memfd, shared and writable, and reports
// whether it is sealed against shrinking.
func mapMemfd(fd int) ([]byte, bool, error) {
	// Only memfds: a regular file's pages could be truncated by anyone with
	// access to the path, and a device could be anything.
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, false, fmt.Errorf("descriptor: %w", err)
	}
	if !strings.HasPrefix(link, "/memfd:") {
		return nil, false, fmt.Errorf("descriptor is %q, not a memfd", link)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, fmt.Errorf("fstat: %w", err)
	}
	if st.Size <= 0 {
		return nil, false, errors.New("memfd of size 0")
	}
	// Best effort: forbid shrinking, so the engine cannot turn our mapping
	// into SIGBUS. memfds created without MFD_ALLOW_SEALING refuse (EPERM);
	// for those the store's copies recover the fault as a per-key error,
	// and no KV cache may live in them (the swap core is C: no recovery).
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	sealed := err == nil && seals&unix.F_SEAL_SHRINK != 0
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false, fmt.Errorf("mmap %d bytes: %w", st.Size, err)
	}
	return mem, sealed, nil
}
