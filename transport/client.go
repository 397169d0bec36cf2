package transport

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// Call is one outgoing request.
type Call struct {
	Op   frame.Opcode
	Key  []byte
	Body Payload
}

// Do sends call to the peer at addr (host:port) on a new stream of a pooled
// connection and returns the response once its header has arrived. A
// non-OK status is returned as a *frame.Error (match it with errors.Is and
// the frame sentinels). The request runs until ctx's deadline, or
// RequestTimeout when ctx has none, which also bounds reading the
// response; the caller must Close the response.
//
// An idempotent opcode may travel as 0-RTT data on a reconnect; any other
// waits for the handshake to complete.
func (e *Endpoint) Do(ctx context.Context, addr string, call Call) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.cfg.RequestTimeout)
		resp, err := e.do(ctx, addr, call)
		if err != nil {
			cancel()
			return nil, err
		}
		resp.cancel = cancel
		return resp, nil
	}
	return e.do(ctx, addr, call)
}

func (e *Endpoint) do(ctx context.Context, addr string, call Call) (*Response, error) {
	op := opLabel(uint8(call.Op))
	conn, err := e.pool.get(ctx, addr, e.cfg.ConnsPerPeer)
	if err != nil {
		e.m.calls.WithLabelValues(op, "unreachable").Inc()
		return nil, err
	}
	resp, err := e.roundTrip(ctx, conn, addr, call)
	if errors.Is(err, quic.Err0RTTRejected) {
		// The peer forgot our session ticket: nothing was served, so
		// send again once the full handshake is done.
		if err = usable(ctx, conn); err == nil {
			resp, err = e.roundTrip(ctx, conn, addr, call)
		}
	}
	e.m.calls.WithLabelValues(op, failureStatus(err).String()).Inc()
	return resp, err
}

func (e *Endpoint) roundTrip(ctx context.Context, conn *quic.Conn, addr string, call Call) (*Response, error) {
	if !call.Op.Idempotent() {
		if err := usable(ctx, conn); err != nil {
			return nil, err
		}
	}
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	s.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() {
		s.CancelRead(codeCanceled)
		s.CancelWrite(codeCanceled)
	})
	fail := func(err error) (*Response, error) {
		stop()
		s.CancelRead(codeCanceled)
		s.CancelWrite(codeCanceled)
		return nil, timeoutError(ctx, err)
	}

	h := frame.Header{Code: uint8(call.Op), Field: call.Key, Length: call.Body.Len, Checksum: call.Body.CRC}
	werr := e.writeFrame(s, h, call.Body)
	if werr == nil {
		werr = s.Close()
	}
	// A server that refuses a request answers before reading all of it
	// and stops our writes: its answer says why, so read it regardless.
	rh, err := frame.ReadHeader(s, e.cfg.MaxPayload)
	if err != nil {
		if werr != nil {
			err = werr
		}
		if !errors.Is(err, quic.Err0RTTRejected) {
			e.refusals.record("client", refusalReason(err), addr, err)
		}
		return fail(err)
	}
	if status := frame.Status(rh.Code); status != frame.StatusOK {
		stop()
		s.CancelRead(codeUnread)
		return nil, &frame.Error{Status: status, Msg: string(rh.Field)}
	}
	if werr != nil {
		return fail(werr)
	}
	return &Response{e: e, ctx: ctx, addr: addr, stream: s, stop: stop, body: frame.NewBody(s, rh.Length, rh.Checksum), Length: rh.Length}, nil
}

// timeoutError marks err as frame.ErrTimeout when the request ran out of
// time, whether the stream deadline or the context noticed first.
func timeoutError(ctx context.Context, err error) error {
	if errors.Is(err, frame.ErrTimeout) || (ctx.Err() == nil && failureStatus(err) != frame.StatusTimeout) {
		return err
	}
	return fmt.Errorf("%w: %w", frame.ErrTimeout, err)
}

// Response is the payload of a successful request. Its invariant, as for
// frame.Body: Read returns io.EOF only once the payload's length and
// checksum are verified, so act on it only after that (or use Fill).
type Response struct {
	Length uint64

	e      *Endpoint
	ctx    context.Context
	addr   string
	stream *quic.Stream
	body   *frame.Body
	stop   func() bool
	cancel context.CancelFunc // the RequestTimeout context Do made, if any
	closed bool
	failed bool // a failure was logged and counted
}

func (r *Response) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.e.m.received.Add(float64(n))
	if err == nil || err == io.EOF {
		return n, err
	}
	err = timeoutError(r.ctx, err)
	if !r.failed {
		r.failed = true
		r.e.refusals.record("client", refusalReason(err), r.addr, err)
	}
	return n, err
}

// Fill reads the whole payload into dst, which must be exactly Length
// bytes, and returns nil only once it is verified.
func (r *Response) Fill(dst []byte) error {
	if uint64(len(dst)) != r.body.Remaining() {
		return fmt.Errorf("transport: Fill into %d bytes, %d remain", len(dst), r.body.Remaining())
	}
	if _, err := io.ReadFull(r, dst); err != nil {
		return err
	}
	if _, err := r.Read(nil); err != io.EOF {
		return err
	}
	return nil
}

// Close releases the stream; a payload not read to its end is abandoned.
func (r *Response) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.stop()
	if r.body.Err() != io.EOF {
		r.stream.CancelRead(codeUnread)
	}
	if r.cancel != nil {
		r.cancel()
	}
	return nil
}
