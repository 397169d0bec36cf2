package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// Handler serves the requests of one opcode (see Endpoint.Handle). It must
// answer through w at most once; returning without an answer sends
// StatusInternal, or the status of the failure that ended req.Body. ctx ends
// at the request's deadline or when the connection closes.
type Handler interface {
	ServeStream(ctx context.Context, req *Request, w *ResponseWriter)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request, w *ResponseWriter)

// ServeStream calls f.
func (f HandlerFunc) ServeStream(ctx context.Context, req *Request, w *ResponseWriter) {
	f(ctx, req, w)
}

// Request is one incoming request.
type Request struct {
	Op  frame.Opcode
	Key []byte
	// Body is the payload of Body.Remaining() bytes. Act on it only after
	// reading it to io.EOF (or with Body.Fill): only then are its length
	// and checksum verified.
	Body *frame.Body
	// Peer is the node name in the caller's verified certificate; From
	// its address.
	Peer string
	From net.Addr
}

// Payload is a body of known length and crc32c checksum, sent after a
// header that declares both.
type Payload struct {
	R   io.Reader
	Len uint64
	// CRC is the crc32c (frame.Checksum) of the Len bytes R yields. The
	// receiver refuses the payload if it does not match.
	CRC uint32
}

// Bytes is the Payload of b, checksummed.
func Bytes(b []byte) Payload {
	return Payload{R: bytes.NewReader(b), Len: uint64(len(b)), CRC: frame.Checksum(b)}
}

// ResponseWriter sends the one response to a request.
type ResponseWriter struct {
	e      *Endpoint
	stream *quic.Stream
	status frame.Status
	sent   bool
}

var errAnswered = errors.New("transport: response already sent")

// Send answers with status and payload p (use Payload{} for none).
func (w *ResponseWriter) Send(status frame.Status, p Payload) error {
	if w.sent {
		return errAnswered
	}
	w.sent, w.status = true, status
	return w.e.writeFrame(w.stream, frame.Header{Code: uint8(status), Length: p.Len, Checksum: p.CRC}, p)
}

// Error answers with err's status (frame.StatusOf; StatusTimeout for a
// deadline) and its text as the message.
func (w *ResponseWriter) Error(err error) error {
	if w.sent {
		return errAnswered
	}
	msg := err.Error()
	if len(msg) > frame.MaxFieldLen {
		msg = msg[:frame.MaxFieldLen]
	}
	w.sent, w.status = true, failureStatus(err)
	return w.e.writeFrame(w.stream, frame.Header{Code: uint8(w.status), Field: []byte(msg)}, Payload{})
}

// writeFrame writes a header and its payload to a stream, failing if the
// payload source yields other than exactly p.Len bytes.
func (e *Endpoint) writeFrame(s *quic.Stream, h frame.Header, p Payload) error {
	hdr, err := h.Append(make([]byte, 0, frame.HeaderLen+len(h.Field)))
	if err != nil {
		return err
	}
	if _, err := s.Write(hdr); err != nil {
		return err
	}
	if p.Len == 0 {
		return nil
	}
	var n int64
	if whole, ok := p.R.(interface {
		io.WriterTo
		Len() int
	}); ok && uint64(whole.Len()) == p.Len {
		// An in-memory payload (bytes.Reader, bytes.Buffer) goes to
		// quic-go in one Write, which packs straight from it.
		n, err = whole.WriteTo(s)
	} else {
		// Any other source goes through a pooled buffer, so a stream of
		// any length costs no allocation and quic-go gets writes of up to
		// copyBufferSize (io.Copy's own 32 KiB buffer would be both).
		buf := copyBuffers.Get().(*[]byte)
		n, err = io.CopyBuffer(onlyWriter{s}, io.LimitReader(p.R, int64(p.Len)), *buf)
		copyBuffers.Put(buf)
	}
	e.m.sent.Add(float64(n))
	if err != nil {
		return err
	}
	if uint64(n) != p.Len {
		return errors.New("transport: payload source ended before its declared length")
	}
	return nil
}

// copyBufferSize is the size of the writes a streamed payload is sent in:
// large enough that quic-go packs many full packets per Write.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// onlyWriter hides everything but Write, so io.CopyBuffer uses the buffer
// it is given.
type onlyWriter struct{ io.Writer }
