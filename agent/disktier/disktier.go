// Package disktier is the disk tier's storage: one file per block under a
// data directory, each carrying a header checksum and a data checksum.
//
// Invariants: a block file only ever appears under its final name complete
// (it is written to a temporary name and renamed), so a crash leaves either
// the whole block or no block; a block whose header or data checksum fails
// is never returned. Dir keeps no index: the store owns the index and
// rebuilds it at start-up from Scan.
package disktier

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C every tier uses for block data.
func Checksum(data []byte) uint32 { return crc32.Checksum(data, castagnoli) }

// UpdateChecksum extends a running checksum.
func UpdateChecksum(crc uint32, data []byte) uint32 { return crc32.Update(crc, castagnoli, data) }

var (
	// ErrCorrupt: the file's header or data does not match its checksums.
	ErrCorrupt = errors.New("block file corrupt")
	// ErrNotFound: no file for the block.
	ErrNotFound = errors.New("block file not found")
)

const (
	magic      = 0x4b564d42 // "KVMB"
	version    = 1
	fixedLen   = 40 // header bytes before the variable fields
	suffix     = ".blk"
	tempSuffix = ".tmp"
)

// Meta is what a block file says about its block.
type Meta struct {
	Namespace string
	Key       []byte
	Parent    []byte
	Size      uint64
	Tokens    uint32
	CRC       uint32 // CRC-32C of the data
	Version   uint64 // tells apart successive blocks stored under one key
	ModTime   int64  // unix nanoseconds of the file's last write
}

// Dir is a directory of block files.
type Dir struct {
	root string
}

// Open prepares root for block files and removes temporary files a crash
// left behind. It fails if root cannot be created or written.
func Open(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("disk tier: %w", err)
	}
	probe, err := os.CreateTemp(root, "probe-*"+tempSuffix)
	if err != nil {
		return nil, fmt.Errorf("disk tier: directory %s is not writable: %w", root, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return &Dir{root: root}, nil
}

// Root is the directory the blocks live in.
func (d *Dir) Root() string { return d.root }

// path names the file of one version of a block. The hash spreads files
// over 256 subdirectories and keeps names a fixed length whatever the key;
// the version gives every write its own file, so a slow write of an old
// version can never overwrite or delete a newer one.
func (d *Dir) path(ns string, key []byte, ver uint64) string {
	h := sha256.New()
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(ns)))
	h.Write(n[:])
	h.Write([]byte(ns))
	h.Write(key)
	name := hex.EncodeToString(h.Sum(nil)[:16])
	return filepath.Join(d.root, name[:2], fmt.Sprintf("%s-%016x%s", name[2:], ver, suffix))
}

func encodeHeader(m *Meta) []byte {
	varLen := len(m.Namespace) + len(m.Key) + len(m.Parent)
	h := make([]byte, fixedLen+varLen+4)
	le := binary.LittleEndian
	le.PutUint32(h[0:], magic)
	le.PutUint16(h[4:], version)
	le.PutUint16(h[6:], uint16(len(m.Namespace)))
	le.PutUint32(h[8:], uint32(len(h)))
	le.PutUint16(h[12:], uint16(len(m.Key)))
	le.PutUint16(h[14:], uint16(len(m.Parent)))
	le.PutUint64(h[16:], m.Size)
	le.PutUint32(h[24:], m.Tokens)
	le.PutUint32(h[28:], m.CRC)
	le.PutUint64(h[32:], m.Version)
	off := fixedLen
	off += copy(h[off:], m.Namespace)
	off += copy(h[off:], m.Key)
	off += copy(h[off:], m.Parent)
	le.PutUint32(h[off:], Checksum(h[:off]))
	return h
}

// readHeader reads and checks the header at the start of f.
func readHeader(f *os.File) (*Meta, int64, error) {
	var fixed [fixedLen]byte
	if _, err := io.ReadFull(f, fixed[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: short header", ErrCorrupt)
	}
	le := binary.LittleEndian
	if le.Uint32(fixed[0:]) != magic || le.Uint16(fixed[4:]) != version {
		return nil, 0, fmt.Errorf("%w: bad magic or version", ErrCorrupt)
	}
	nsLen, hdrLen := int(le.Uint16(fixed[6:])), int(le.Uint32(fixed[8:]))
	keyLen, parentLen := int(le.Uint16(fixed[12:])), int(le.Uint16(fixed[14:]))
	if hdrLen != fixedLen+nsLen+keyLen+parentLen+4 {
		return nil, 0, fmt.Errorf("%w: header length", ErrCorrupt)
	}
	h := make([]byte, hdrLen)
	copy(h, fixed[:])
	if _, err := io.ReadFull(f, h[fixedLen:]); err != nil {
		return nil, 0, fmt.Errorf("%w: short header", ErrCorrupt)
	}
	if Checksum(h[:hdrLen-4]) != le.Uint32(h[hdrLen-4:]) {
		return nil, 0, fmt.Errorf("%w: header checksum", ErrCorrupt)
	}
	off := fixedLen
	m := &Meta{
		Size:    le.Uint64(h[16:]),
		Tokens:  le.Uint32(h[24:]),
		CRC:     le.Uint32(h[28:]),
		Version: le.Uint64(h[32:]),
	}
	m.Namespace = string(h[off : off+nsLen])
	off += nsLen
	m.Key = bytes.Clone(h[off : off+keyLen])
	off += keyLen
	if parentLen > 0 {
		m.Parent = bytes.Clone(h[off : off+parentLen])
	}
	return m, int64(hdrLen), nil
}

// Write stores a block whose data is the concatenation of parts, replacing
// any earlier file of the same key. With sync the file and its directory
// are fsync'd before Write returns, so the block survives a power cut; a
// crash of the agent alone never loses a written block either way.
func (d *Dir) Write(m *Meta, parts [][]byte, sync bool) error {
	final := d.path(m.Namespace, m.Key, m.Version)
	dir := filepath.Dir(final)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(final)+".*"+tempSuffix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeFile(f, encodeHeader(m), parts, sync)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if sync {
		return syncDir(dir)
	}
	return nil
}

func writeFile(f *os.File, header []byte, parts [][]byte, sync bool) error {
	if _, err := f.Write(header); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := f.Write(p); err != nil {
			return err
		}
	}
	if sync {
		return f.Sync()
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Read copies one version of a block's data into dst, a vector of buffers
// filled in order whose lengths must add up to the block's size. It checks
// the key and the data checksum; on ErrCorrupt dst may hold garbage and the
// caller must drop the block.
func (d *Dir) Read(ns string, key []byte, ver uint64, dst [][]byte) (*Meta, error) {
	f, err := os.Open(d.path(ns, key, ver))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, _, err := readHeader(f)
	if err != nil {
		return nil, err
	}
	if m.Namespace != ns || !bytes.Equal(m.Key, key) {
		return nil, ErrNotFound // another key's file under a colliding name
	}
	var total uint64
	for _, p := range dst {
		total += uint64(len(p))
	}
	if total != m.Size {
		return m, fmt.Errorf("buffers of %d bytes for a %d-byte block", total, m.Size)
	}
	var crc uint32
	for _, p := range dst {
		if _, err := io.ReadFull(f, p); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return m, fmt.Errorf("%w: short data", ErrCorrupt)
			}
			return m, err // e.g. EFAULT from a caller's buffer: the file is fine
		}
		crc = UpdateChecksum(crc, p)
	}
	if crc != m.CRC {
		return m, fmt.Errorf("%w: data checksum", ErrCorrupt)
	}
	return m, nil
}

// Delete removes one version of a block; a missing file is not an error.
func (d *Dir) Delete(ns string, key []byte, ver uint64) error {
	err := os.Remove(d.path(ns, key, ver))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Footprint is the bytes a block of size bytes takes on disk, header
// included, rounded up to the file system's 4 KiB blocks.
func Footprint(m *Meta) uint64 {
	n := uint64(fixedLen+len(m.Namespace)+len(m.Key)+len(m.Parent)+4) + m.Size
	return (n + 4095) &^ 4095
}

// Scan reports every intact block file to fn, in no particular order. It
// deletes leftover temporary files, and files whose header is corrupt or
// whose length disagrees with the header, counting the latter in corrupt.
// Data checksums are checked on every Read rather than here, so start-up
// time does not grow with the bytes stored.
func (d *Dir) Scan(fn func(*Meta)) (corrupt int, err error) {
	err = filepath.WalkDir(d.root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		name := e.Name()
		switch {
		case strings.HasSuffix(name, tempSuffix):
			os.Remove(path)
		case strings.HasSuffix(name, suffix):
			m, err := statBlock(path)
			if err != nil {
				corrupt++
				os.Remove(path)
				return nil
			}
			if d.path(m.Namespace, m.Key, m.Version) != path {
				corrupt++ // a file renamed by hand: it would never be found
				os.Remove(path)
				return nil
			}
			fn(m)
		}
		return nil
	})
	return corrupt, err
}

func statBlock(path string) (*Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, hdrLen, err := readHeader(f)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != hdrLen+int64(m.Size) {
		return nil, fmt.Errorf("%w: file length", ErrCorrupt)
	}
	m.ModTime = st.ModTime().UnixNano()
	return m, nil
}
