package disktier

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func meta(key string, data []byte, ver uint64) *Meta {
	return &Meta{Namespace: "default", Key: []byte(key), Size: uint64(len(data)), CRC: Checksum(data),
		Tokens: 16, Parent: []byte("parent"), Version: ver}
}

func blockFile(t *testing.T, d *Dir) string {
	t.Helper()
	var found []string
	filepath.WalkDir(d.Root(), func(p string, e os.DirEntry, _ error) error {
		if strings.HasSuffix(p, suffix) {
			found = append(found, p)
		}
		return nil
	})
	if len(found) != 1 {
		t.Fatalf("want one block file, found %v", found)
	}
	return found[0]
}

func TestWriteReadRoundTrip(t *testing.T) {
	t.Parallel()
	for _, sync := range []bool{false, true} {
		d, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte("kv"), 5000)
		if err := d.Write(meta("k", data, 1), [][]byte{data[:3], data[3:]}, sync); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(data))
		m, err := d.Read("default", []byte("k"), 1, [][]byte{dst[:100], dst[100:]})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, data) || string(m.Parent) != "parent" || m.Tokens != 16 {
			t.Fatalf("round trip lost data or metadata: %+v", m)
		}
		if _, err := d.Read("default", []byte("k"), 2, [][]byte{dst}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another version: %v, want ErrNotFound", err)
		}
	}
}

// Every kind of damage is caught: by Scan when the header or length is
// wrong, by Read when the data is.
func TestDamageIsNeverServed(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte{0xab}, 10000)
	tests := []struct {
		name         string
		damage       func(path string)
		scanDrops    bool
		readErrIsBad bool
	}{
		{"flipped data byte", func(p string) { flip(p, -1) }, false, true},
		{"flipped header byte", func(p string) { flip(p, 20) }, true, true},
		{"truncated file", func(p string) { os.Truncate(p, 5000) }, true, true},
		{"appended bytes", func(p string) {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("junk"))
			f.Close()
		}, true, false},
		{"empty file", func(p string) { os.Truncate(p, 0) }, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, _ := Open(t.TempDir())
			if err := d.Write(meta("k", data, 7), [][]byte{data}, false); err != nil {
				t.Fatal(err)
			}
			tc.damage(blockFile(t, d))
			dst := make([]byte, len(data))
			_, err := d.Read("default", []byte("k"), 7, [][]byte{dst})
			if tc.readErrIsBad && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Read of damaged block: %v, want ErrCorrupt", err)
			}
			var seen int
			corrupt, err := d.Scan(func(*Meta) { seen++ })
			if err != nil {
				t.Fatal(err)
			}
			if tc.scanDrops && (corrupt != 1 || seen != 0) {
				t.Fatalf("Scan: corrupt=%d seen=%d, want the file dropped", corrupt, seen)
			}
			if !tc.scanDrops && (corrupt != 0 || seen != 1) {
				t.Fatalf("Scan: corrupt=%d seen=%d, want the file kept for Read to judge", corrupt, seen)
			}
		})
	}
}

func flip(path string, at int64) {
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer f.Close()
	if at < 0 {
		st, _ := f.Stat()
		at = st.Size() + at
	}
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0xff
	f.WriteAt(b, at)
}

func TestScanRemovesTempFilesAndReportsMeta(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, _ := Open(root)
	data := []byte("hello")
	d.Write(meta("a", data, 1), [][]byte{data}, true)
	d.Write(meta("b", data, 2), [][]byte{data}, true)
	os.MkdirAll(filepath.Join(root, "ab"), 0o755)
	leftover := filepath.Join(root, "ab", "x.blk.123.tmp")
	os.WriteFile(leftover, []byte("torn"), 0o644)

	got := map[string]uint64{}
	corrupt, err := d.Scan(func(m *Meta) { got[string(m.Key)] = m.Version })
	if err != nil || corrupt != 0 {
		t.Fatalf("Scan: %v, corrupt %d", err, corrupt)
	}
	if got["a"] != 1 || got["b"] != 2 || len(got) != 2 {
		t.Fatalf("Scan saw %v", got)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("temporary file survived Scan")
	}
}

func TestOpenRefusesUnwritableDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := Open(filepath.Join(file, "blocks")); err == nil {
		t.Fatal("opened a directory under a regular file")
	}
}
