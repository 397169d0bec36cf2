package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func encode(t *testing.T, h Header, payload []byte) []byte {
	t.Helper()
	b, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

func TestHeaderRoundTrip(t *testing.T) {
	payload := []byte("block bytes")
	in := Header{Code: 0x81, Field: []byte("ns/key-1"), Length: uint64(len(payload)), Checksum: Checksum(payload)}
	r := bytes.NewReader(encode(t, in, payload))
	out, err := ReadHeader(r, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if out.Code != in.Code || !bytes.Equal(out.Field, in.Field) || out.Length != in.Length || out.Checksum != in.Checksum {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	got, err := io.ReadAll(NewBody(r, out.Length, out.Checksum))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("body = %q, %v", got, err)
	}
}

func TestReadHeaderRejects(t *testing.T) {
	good := encode(t, Header{Code: 1, Field: []byte("k"), Length: 10}, nil)
	wrongVersion := bytes.Clone(good)
	wrongVersion[0] = Version + 1
	longField := bytes.Clone(good)
	longField[2], longField[3] = 0xFF, 0xFF
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrBadFrame},
		{"short fixed part", good[:7], ErrBadFrame},
		{"short field", good[:HeaderLen], ErrBadFrame},
		{"other version", wrongVersion, ErrBadVersion},
		{"field over limit", longField, ErrBadFrame},
		{"payload over limit", encode(t, Header{Length: 11}, nil), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tc.in), 10)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAppendRejectsLongField(t *testing.T) {
	if _, err := (Header{Field: make([]byte, MaxFieldLen+1)}).Append(nil); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("err = %v, want ErrBadFrame", err)
	}
}

func TestBodyRejects(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 1000)
	sum := Checksum(payload)
	for _, tc := range []struct {
		name   string
		stream []byte
		length uint64
		sum    uint32
		want   error
	}{
		{"short", payload[:999], 1000, sum, ErrBadFrame},
		{"long", append(bytes.Clone(payload), 'y'), 1000, sum, ErrBadFrame},
		{"checksum", payload, 1000, sum ^ 1, ErrChecksum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBody(bytes.NewReader(tc.stream), tc.length, tc.sum)
			_, err := io.ReadAll(b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !errors.Is(b.Err(), tc.want) {
				t.Fatalf("Err() = %v, want %v", b.Err(), tc.want)
			}
		})
	}
}

// Fill reads into a buffer of exactly the declared length and must still
// report a checksum failure that comes with the last bytes.
func TestBodyFill(t *testing.T) {
	payload := []byte("abcdef")
	buf := make([]byte, 6)
	if err := NewBody(bytes.NewReader(payload), 6, Checksum(payload)).Fill(buf); err != nil || !bytes.Equal(buf, payload) {
		t.Fatalf("Fill = %q, %v", buf, err)
	}
	if err := NewBody(bytes.NewReader(payload), 6, Checksum(payload)^0xFF).Fill(buf); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Fill err = %v, want ErrChecksum", err)
	}
	if err := NewBody(bytes.NewReader(payload), 6, Checksum(payload)).Fill(buf[:5]); err == nil {
		t.Fatal("Fill into a short buffer succeeded")
	}
}

func TestEmptyBody(t *testing.T) {
	b := NewBody(bytes.NewReader(nil), 0, 0)
	if n, err := b.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, EOF", n, err)
	}
}

func TestStatusError(t *testing.T) {
	err := error(&Error{Status: StatusNotOwner, Msg: "key k belongs to b"})
	if !errors.Is(err, ErrNotOwner) || errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is mismatched for %v", err)
	}
	if StatusOf(err) != StatusNotOwner || StatusOf(nil) != StatusOK || StatusOf(io.EOF) != StatusInternal {
		t.Fatal("StatusOf mismatched")
	}
	if StatusChecksum.String() != "checksum" || Status(200).String() != "status_200" {
		t.Fatal("unexpected status names")
	}
}

func TestIdempotentOpcodes(t *testing.T) {
	if !Opcode(0x01).Idempotent() || Opcode(0x80).Idempotent() || OpGossip.Idempotent() {
		t.Fatal("opcode classes: below 0x80 idempotent, 0x80 and up not")
	}
}

// FuzzReadHeader: no input may panic the parser or yield a header that
// breaks the limits it was given.
func FuzzReadHeader(f *testing.F) {
	good, _ := Header{Code: 1, Field: []byte("key"), Length: 5, Checksum: 7}.Append(nil)
	f.Add(good)
	f.Add([]byte{Version, 0, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ReadHeader(bytes.NewReader(in), 1<<20)
		if err != nil {
			return
		}
		if len(h.Field) > MaxFieldLen || h.Length > 1<<20 {
			t.Fatalf("limits broken: %+v", h)
		}
		out, err := h.Append(nil)
		if err != nil || !bytes.Equal(out, in[:len(out)]) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}
