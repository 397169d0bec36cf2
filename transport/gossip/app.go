package gossip

import (
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/memberlist"
)

// App is state an application gossips beside membership: small messages
// broadcast to every member (Membership.Broadcast), and a whole state that
// memberlist's push/pull syncs exchange — on every join and every
// PushPullInterval — so a newcomer, a restarted member or the two sides of
// a healed partition catch up with what broadcasts they missed.
//
// Memberlist calls these from its own goroutines with its locks held:
// none may block (hand the work to a goroutine of your own).
type App interface {
	// LocalState is this node's whole state, sent to the peer of a sync;
	// join says whether the sync is part of a join.
	LocalState(join bool) []byte
	// MergeRemoteState takes the state a peer sent in a sync.
	MergeRemoteState(buf []byte, join bool)
	// NotifyMsg takes a broadcast from a peer; msg is the App's to keep.
	NotifyMsg(msg []byte)
}

// maxAppMessage bounds a broadcast: it must fit a gossip packet beside
// memberlist's own headers.
const maxAppMessage = packetBudget - 128

// appSlot holds the membership's App, if any, and its broadcast queue.
type appSlot struct{ p atomic.Pointer[appState] }

type appState struct {
	app   App
	queue *memberlist.TransmitLimitedQueue
}

func (s *appSlot) load() *appState { return s.p.Load() }

// SetApp has the membership gossip app's state; call it once, right after
// Start and before Join, so the first sync already carries it. Each
// broadcast is sent MinRetransmitMult·log(N+1) times.
func (m *Membership) SetApp(app App) {
	m.app.p.Store(&appState{app: app, queue: &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return m.ml.NumMembers() },
		RetransmitMult: MinRetransmitMult,
	}})
}

// Broadcast queues msg for every member's App. A queued broadcast with the
// same key is dropped: the newer message supersedes it. Broadcasts are best
// effort; the push/pull syncs make up for any a member misses.
func (m *Membership) Broadcast(key string, msg []byte) error {
	s := m.app.load()
	if s == nil {
		return fmt.Errorf("gossip: Broadcast before SetApp")
	}
	if len(msg) > maxAppMessage {
		return fmt.Errorf("gossip: broadcast of %d bytes exceeds %d", len(msg), maxAppMessage)
	}
	s.queue.QueueBroadcast(&appBroadcast{key: key, msg: msg})
	return nil
}

// appBroadcast is one queued message; a newer one under the same key
// invalidates it.
type appBroadcast struct {
	key string
	msg []byte
}

var _ memberlist.NamedBroadcast = (*appBroadcast)(nil)

func (b *appBroadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*appBroadcast)
	return ok && ob.key == b.key
}
func (b *appBroadcast) Name() string    { return "app/" + b.key }
func (b *appBroadcast) Message() []byte { return b.msg }
func (b *appBroadcast) Finished()       {}
