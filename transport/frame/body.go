package frame

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Body reads the payload that follows a header. Its invariant: Read returns
// io.EOF only after exactly the declared number of bytes arrived, their
// crc32c matched the declared checksum, and the sender closed the stream
// right after them. A payload that ends early or runs long is ErrBadFrame,
// one that fails its checksum ErrChecksum; so a reader must not act on a
// payload it has not read to io.EOF.
type Body struct {
	r         io.Reader
	remaining uint64
	want      uint32
	crc       uint32
	err       error // sticky: io.EOF once verified, or the failure
}

// NewBody returns a Body reading a payload of length bytes with checksum
// sum from r.
func NewBody(r io.Reader, length uint64, sum uint32) *Body {
	return &Body{r: r, remaining: length, want: sum}
}

// Remaining is the number of declared bytes not read yet.
func (b *Body) Remaining() uint64 { return b.remaining }

// Err is the error that ended the body: nil while it is being read (or was
// never read to its end), io.EOF once verified.
func (b *Body) Err() error { return b.err }

func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		b.err = b.finish()
		return 0, b.err
	}
	if uint64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.r.Read(p)
	b.crc = crc32.Update(b.crc, Castagnoli, p[:n])
	b.remaining -= uint64(n)
	switch {
	case err == io.EOF && b.remaining > 0:
		b.err = fmt.Errorf("%w: payload ended %d bytes short", ErrBadFrame, b.remaining)
		return n, b.err
	case err != nil && err != io.EOF:
		b.err = err
		return n, err
	case b.remaining == 0:
		// Verify now, so the last bytes come with the verdict and callers
		// using io.ReadFull still see a checksum failure.
		if b.err = b.finish(); b.err != io.EOF {
			return n, b.err
		}
	}
	return n, nil
}

// finish checks the checksum and that nothing follows the payload.
func (b *Body) finish() error {
	if b.crc != b.want {
		return fmt.Errorf("%w: payload crc32c %08x, header declared %08x", ErrChecksum, b.crc, b.want)
	}
	var extra [1]byte
	for {
		n, err := b.r.Read(extra[:])
		if n > 0 {
			return fmt.Errorf("%w: payload runs past its declared length", ErrBadFrame)
		}
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if err != nil {
			return err
		}
	}
}

// Fill reads the whole remaining payload into dst, which must be exactly
// Remaining() bytes long, and returns nil only once the payload is verified
// (io.ReadFull alone would drop a checksum failure that arrives with the
// last bytes).
func (b *Body) Fill(dst []byte) error {
	if uint64(len(dst)) != b.remaining {
		return fmt.Errorf("frame: Fill into %d bytes, %d remain", len(dst), b.remaining)
	}
	if _, err := io.ReadFull(b, dst); err != nil {
		return err
	}
	if _, err := b.Read(nil); err != io.EOF {
		return err
	}
	return nil
}
