package store

import (
	"errors"
	"fmt"
)

// Code is a per-key result code: the operations return bytes moved (>= 0)
// or one of these negative codes. docs/errors.md lists them for clients.
type Code int32

const (
	CodeNotFound         Code = -1  // no block under the key
	CodeInvalidKey       Code = -2  // key empty or longer than 512 bytes
	CodeTooLarge         Code = -3  // value larger than the maximum block size
	CodeUnknownNamespace Code = -4  // namespace not configured on this agent
	CodeNoSpace          Code = -5  // the tier cannot make room (disk full, all pinned)
	CodeIO               Code = -6  // the disk failed the read or write
	CodeCorrupt          Code = -7  // the stored copy failed its checksum and was dropped
	CodeBufferSize       Code = -8  // the caller's buffer does not match the block's size
	CodeInvalidArgument  Code = -9  // a malformed request
	CodeUnavailable      Code = -10 // the agent is shutting down or lacks the capability
	CodeOutOfRange       Code = -11 // an iovec reaches outside its registered pool
	CodeUnknownPool      Code = -12 // no registered pool has the id (never was, or its connection closed)
)

var codeNames = map[Code]string{
	CodeNotFound:         "NOT_FOUND",
	CodeInvalidKey:       "INVALID_KEY",
	CodeTooLarge:         "TOO_LARGE",
	CodeUnknownNamespace: "UNKNOWN_NAMESPACE",
	CodeNoSpace:          "NO_SPACE",
	CodeIO:               "IO_ERROR",
	CodeCorrupt:          "CORRUPT",
	CodeBufferSize:       "BUFFER_SIZE",
	CodeInvalidArgument:  "INVALID_ARGUMENT",
	CodeUnavailable:      "UNAVAILABLE",
	CodeOutOfRange:       "OUT_OF_RANGE",
	CodeUnknownPool:      "UNKNOWN_POOL",
}

func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CODE(%d)", int32(c))
}

// Error is a failed operation on one key.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Msg }

func errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf is the code of err: CodeUnavailable for errors that are not *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeUnavailable
}

// IsNotFound reports whether err means the key holds no block.
func IsNotFound(err error) bool { return CodeOf(err) == CodeNotFound }
