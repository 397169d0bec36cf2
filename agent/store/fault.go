package store

import (
	"runtime"
	"runtime/debug"
)

// copyGuarded runs a copy to or from caller memory, which may be a client's
// mmap'd memfd pool: if the client shrinks the file under us, touching the
// lost pages raises SIGBUS. With panic-on-fault that becomes a panic in this
// goroutine, recovered here into a per-key error instead of killing the
// agent.
func copyGuarded(copyFn func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if re, ok := r.(runtime.Error); ok {
			if _, isFault := r.(interface{ Addr() uintptr }); isFault {
				err = errorf(CodeInvalidArgument, "client memory faulted during the copy (pool shrunk?): %v", re)
				return
			}
		}
		panic(r)
	}()
	copyFn()
	return nil
}
