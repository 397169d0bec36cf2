package frame

import (
	"errors"
	"fmt"
)

// Status is the outcome a response header carries.
type Status uint8

// Statuses below 32 belong to the application (the store's remote tier);
// from 32 up they report a request the transport itself refused.
const (
	StatusOK       Status = 0
	StatusNotFound Status = 1
	// StatusNotOwner: the key does not belong to the serving node.
	StatusNotOwner Status = 2

	// StatusBadFrame: a header or payload of the wrong length.
	StatusBadFrame      Status = 32
	StatusBadVersion    Status = 33
	StatusUnknownOpcode Status = 34
	// StatusChecksum: the payload did not match its declared crc32c.
	StatusChecksum Status = 35
	StatusTooLarge Status = 36
	// StatusTimeout: the request missed its deadline (a peer stalled).
	StatusTimeout     Status = 37
	StatusUnavailable Status = 38
	StatusInternal    Status = 39
)

var statusNames = map[Status]string{
	StatusOK:            "ok",
	StatusNotFound:      "not_found",
	StatusNotOwner:      "not_owner",
	StatusBadFrame:      "bad_frame",
	StatusBadVersion:    "bad_version",
	StatusUnknownOpcode: "unknown_opcode",
	StatusChecksum:      "checksum",
	StatusTooLarge:      "too_large",
	StatusTimeout:       "timeout",
	StatusUnavailable:   "unavailable",
	StatusInternal:      "internal",
}

// String is the status's metric label, e.g. "checksum".
func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status_%d", uint8(s))
}

// Error is a request that ended with a non-OK status. errors.Is matches it
// against the sentinels below by status alone.
type Error struct {
	Status Status
	Msg    string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Msg
}

// Is reports whether target is an *Error of the same status with no message
// of its own (one of the sentinels).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && t.Msg == ""
}

// Sentinels for errors.Is; each matches every *Error of its status.
var (
	ErrNotFound      = &Error{Status: StatusNotFound}
	ErrNotOwner      = &Error{Status: StatusNotOwner}
	ErrBadFrame      = &Error{Status: StatusBadFrame}
	ErrBadVersion    = &Error{Status: StatusBadVersion}
	ErrUnknownOpcode = &Error{Status: StatusUnknownOpcode}
	ErrChecksum      = &Error{Status: StatusChecksum}
	ErrTooLarge      = &Error{Status: StatusTooLarge}
	ErrTimeout       = &Error{Status: StatusTimeout}
	ErrUnavailable   = &Error{Status: StatusUnavailable}
	ErrInternal      = &Error{Status: StatusInternal}
)

// StatusOf returns the status err carries: StatusOK for nil, the status of
// an *Error anywhere in its chain, StatusInternal otherwise.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Status
	}
	return StatusInternal
}
