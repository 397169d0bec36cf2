package gossip_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/transport/localmesh"
)

// setApp is a gossip.App that keeps a set of strings: broadcasts add one,
// syncs merge the whole set.
type setApp struct {
	mu   sync.Mutex
	have map[string]bool
}

func newSetApp() *setApp { return &setApp{have: map[string]bool{}} }

func (a *setApp) add(s string) {
	a.mu.Lock()
	a.have[s] = true
	a.mu.Unlock()
}

func (a *setApp) has(s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.have[s]
}

func (a *setApp) NotifyMsg(msg []byte) { a.add(string(msg)) }

func (a *setApp) LocalState(bool) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	var all []string
	for s := range a.have {
		all = append(all, s)
	}
	return []byte(strings.Join(all, "\n"))
}

func (a *setApp) MergeRemoteState(buf []byte, _ bool) {
	for _, s := range strings.Split(string(buf), "\n") {
		a.add(s)
	}
}

// A broadcast reaches every member's App; a member that joins later gets
// the state in its join's sync; an oversized broadcast is refused.
func TestAppBroadcastAndState(t *testing.T) {
	c, _ := newCluster(t)
	members := start(t, c, 4, "n")
	apps := make([]*setApp, len(members))
	for i, m := range members {
		apps[i] = newSetApp()
		m.SetApp(apps[i])
	}
	if err := localmesh.JoinAll(members[0], members[1:3]); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "members did not converge", func() bool {
		return localmesh.Sees(members[:3], localmesh.Names(members[:3])...)
	})
	if err := members[1].Broadcast("k", []byte("first")); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "the broadcast did not reach every member", func() bool {
		return apps[0].has("first") && apps[2].has("first")
	})

	// The latecomer's join syncs with the seed, whose state has "first"
	// (it never gossiped it itself).
	if _, err := members[3].Join([]string{members[0].Endpoint.Advertise()}); err != nil {
		t.Fatal(err)
	}
	wait(t, 5*time.Second, "the latecomer did not get the state", func() bool { return apps[3].has("first") })

	if err := members[0].Broadcast("k", []byte(strings.Repeat("x", 2000))); err == nil {
		t.Fatal("a broadcast larger than a gossip packet was queued")
	}
}
