package client

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// poolMagic opens a registration on the mempool socket (SGLang HiCache's
// `rpc` wire format, which the agent speaks).
const poolMagic uint64 = 0x8DF6FBFD

// Pool is host memory shared with the agent: a memfd mapped here and in the
// agent. Pool ops move blocks between the store and its bytes with one copy
// in the agent and none here. The agent keeps it registered until Close.
type Pool struct {
	ID   uint32 // names the pool in pool ops
	Mem  []byte // the mapping; offsets in iovecs are into it
	fd   int
	conn *net.UnixConn // registration lives while this stays open
}

// DefaultMempoolSocket is where an agent listening on socket accepts pool
// registrations unless started with --mempool-socket.
func DefaultMempoolSocket(socket string) string {
	return filepath.Join(filepath.Dir(socket), "mempool.sock")
}

// NewPool allocates a memfd of size bytes, maps it, and registers it on the
// agent's mempool socket under name.
func NewPool(mempoolSocket, name string, size int) (*Pool, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	p := &Pool{fd: fd}
	if err := p.init(mempoolSocket, name, size); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pool) init(mempoolSocket, name string, size int) error {
	if err := unix.Ftruncate(p.fd, int64(size)); err != nil {
		return fmt.Errorf("size the memfd: %w", err)
	}
	mem, err := unix.Mmap(p.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	p.Mem = mem
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: mempoolSocket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("mempool socket %s: %w", mempoolSocket, err)
	}
	p.conn = c
	msg := binary.LittleEndian.AppendUint64(nil, poolMagic)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(name)))
	msg = append(msg, name...)
	if _, _, err := c.WriteMsgUnix(msg, unix.UnixRights(p.fd), nil); err != nil {
		return fmt.Errorf("register pool: %w", err)
	}
	var reply [4]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fmt.Errorf("register pool: agent refused it (%w); see its log", err)
	}
	p.ID = binary.LittleEndian.Uint32(reply[:])
	return nil
}

// Close unregisters the pool and frees it; requests naming it afterwards
// fail with UNKNOWN_POOL. Later calls do nothing (a second close of the fd
// could close a descriptor someone else opened since).
func (p *Pool) Close() error {
	if p.fd < 0 {
		return nil
	}
	if p.conn != nil {
		p.conn.Close()
	}
	if p.Mem != nil {
		unix.Munmap(p.Mem)
		p.Mem = nil
	}
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}
