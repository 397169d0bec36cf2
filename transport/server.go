package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/kvmesh/kvmesh/transport/frame"
)

// serveConn serves what a peer sends on one connection, accepted or dialled
// alike: request and gossip streams, gossip datagrams and oversized gossip
// packets on unidirectional streams. Nothing is read before the handshake
// completes except idempotent requests, which may arrive as 0-RTT data.
func (e *Endpoint) serveConn(conn *quic.Conn, dialled bool) {
	ctx := conn.Context()
	e.m.conns.Inc()
	defer e.m.conns.Dec()
	if dialled {
		// Our side never serves 0-RTT data; waiting here also makes the
		// connection usable if the peer rejected our 0-RTT attempt.
		if err := usable(ctx, conn); err != nil {
			return
		}
	}
	e.spawn(func() {
		if err := usable(ctx, conn); err != nil {
			return
		}
		if !dialled {
			e.pool.adopt(conn)
		}
		e.spawn(func() { e.receiveDatagrams(conn) })
		e.spawn(func() { e.receiveUniStreams(conn) })
	})
	for {
		s, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		e.spawn(func() { e.serveStream(conn, s) })
	}
}

// usable waits until conn's handshake has completed. On a connection we
// dialled with 0-RTT that the peer rejected, it also re-enables opening and
// accepting streams (quic-go's NextConnection), so a request that failed
// with quic.Err0RTTRejected can be sent again.
func usable(ctx context.Context, conn *quic.Conn) error {
	_, err := conn.NextConnection(ctx)
	return err
}

// serveStream serves one request, start to finish, within ServeTimeout.
func (e *Endpoint) serveStream(conn *quic.Conn, s *quic.Stream) {
	deadline := time.Now().Add(e.cfg.ServeTimeout)
	ctx, cancel := context.WithDeadline(conn.Context(), deadline)
	defer cancel()
	s.SetDeadline(deadline)
	from := peerName(conn.ConnectionState().TLS) + "@" + conn.RemoteAddr().String()

	h, err := frame.ReadHeader(s, e.cfg.MaxPayload)
	if err != nil {
		e.refuseStream(s, from, err)
		return
	}
	op := frame.Opcode(h.Code)
	handler := e.handlers[op].Load()
	if handler == nil && op != frame.OpGossip {
		e.refuseStream(s, from, &frame.Error{Status: frame.StatusUnknownOpcode, Msg: fmt.Sprintf("opcode %#x", h.Code)})
		return
	}
	if !op.Idempotent() {
		// A request that changes state may have come as 0-RTT data,
		// which an attacker can replay; only a completed handshake
		// proves the peer is live.
		if err := usable(ctx, conn); err != nil {
			s.CancelRead(codeCanceled)
			s.CancelWrite(codeCanceled)
			return
		}
	}
	if op == frame.OpGossip {
		e.acceptGossipStream(ctx, conn, s)
		return
	}
	body := frame.NewBody(s, h.Length, h.Checksum)
	w := &ResponseWriter{e: e, stream: s}
	req := &Request{Op: op, Key: h.Field, Body: body, Peer: peerName(conn.ConnectionState().TLS), From: conn.RemoteAddr()}
	e.callHandler(*handler, ctx, req, w)
	e.m.received.Add(float64(h.Length - body.Remaining()))

	bodyErr := body.Err()
	if bodyErr != nil && bodyErr != io.EOF {
		e.refusals.record("server", refusalReason(bodyErr), from, bodyErr)
	}
	if !w.sent {
		if bodyErr == nil || bodyErr == io.EOF {
			bodyErr = &frame.Error{Status: frame.StatusInternal, Msg: "handler sent no response"}
		}
		w.Error(bodyErr)
	}
	// Stop the peer's writes only if part of the request went unread: a
	// request read whole (or with no payload) may still be waiting for its
	// FIN, and cancelling then would fail the peer's Close of a request
	// that was served.
	if body.Remaining() > 0 || (bodyErr != nil && bodyErr != io.EOF) {
		s.CancelRead(codeRefused) // the rest of the request is not wanted
	}
	s.Close()
	e.m.served.WithLabelValues(opLabel(h.Code), w.status.String()).Inc()
}

// callHandler runs h, turning a panic into StatusInternal and an error log
// with the stack: one faulty request must not take the agent down.
func (e *Endpoint) callHandler(h Handler, ctx context.Context, req *Request, w *ResponseWriter) {
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("transport: handler panicked", "op", uint8(req.Op), "peer", req.Peer, "panic", r, "stack", string(debug.Stack()))
			w.Error(&frame.Error{Status: frame.StatusInternal, Msg: "handler failed"})
		}
	}()
	h.ServeStream(ctx, req, w)
}

// refuseStream answers a request the transport cannot serve with the status
// err carries, logs and counts it, and stops reading the stream.
func (e *Endpoint) refuseStream(s *quic.Stream, from string, err error) {
	reason := refusalReason(err)
	e.refusals.record("server", reason, from, err)
	if reason != "timeout" && reason != "stream_error" {
		w := &ResponseWriter{e: e, stream: s}
		w.Error(err)
	}
	s.CancelRead(codeRefused)
	s.Close()
}

// failureStatus is the status a failed request is answered with.
func failureStatus(err error) frame.Status {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return frame.StatusTimeout
	}
	return frame.StatusOf(err)
}

// refusalReason is the metric label of a failed request: the frame status
// it carries, "timeout" for a deadline, "stream_error" for a stream the
// peer reset or a connection that closed.
func refusalReason(err error) string {
	var fe *frame.Error
	switch {
	case errors.As(err, &fe):
		return fe.Status.String()
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "stream_error"
	}
}
