// Package native runs guest policies natively, for their tests: the sdk's
// records have the host's layout, so a batch converts in place.
package native

import (
	"unsafe"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/wasm-policies/sdk"
)

// The layouts must agree for the conversions below; see also the sdk's
// test of its record layout against the ABI.
var (
	_ [unsafe.Sizeof(sdk.Event{}) - unsafe.Sizeof(policy.Event{})]byte
	_ [unsafe.Sizeof(policy.Event{}) - unsafe.Sizeof(sdk.Event{})]byte
	_ [unsafe.Sizeof(sdk.Decision{}) - 4]byte
)

func asGuest(e []policy.Event) []sdk.Event {
	if len(e) == 0 {
		return nil
	}
	return unsafe.Slice((*sdk.Event)(unsafe.Pointer(&e[0])), len(e))
}

// Eviction adapts a guest eviction policy to the host's interface.
func Eviction(p sdk.Eviction) policy.Eviction { return eviction{p} }

type eviction struct{ p sdk.Eviction }

func (e eviction) Observe(events []policy.Event)          { e.p.Observe(asGuest(events)) }
func (e eviction) Victims(dst []uint64, max int) []uint64 { return e.p.Victims(dst, max) }

// Admission adapts a guest admission policy to the host's interface.
func Admission(p sdk.Admission) policy.Admission { return admission{p} }

type admission struct{ p sdk.Admission }

func (a admission) Admit(inserts []policy.Event, dst []policy.Decision) []policy.Decision {
	for _, d := range a.p.Admit(asGuest(inserts), nil) {
		dst = append(dst, policy.Decision{Disk: policy.DiskWrite(d.Disk), Replicas: d.Replicas, Ack: policy.Durability(d.Ack)})
	}
	return dst
}

// Prefetch adapts a guest prefetch policy to the host's interface.
func Prefetch(p sdk.Prefetch) policy.Prefetch { return prefetch{p} }

type prefetch struct{ p sdk.Prefetch }

func (f prefetch) Prefetch(lookup []policy.Event, dst []uint64) []uint64 {
	return f.p.Prefetch(asGuest(lookup), dst)
}
