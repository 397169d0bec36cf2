package gossip

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/memberlist"
)

// delegate is the Membership as memberlist's Delegate, EventDelegate and
// AliveDelegate. Memberlist calls these with its locks held: none blocks.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.meta // encodeMeta kept it within memberlist.MetaMaxSize
}

// The application's messages and state (SetApp); without an App, none.

func (d *delegate) NotifyMsg(msg []byte) {
	if s := d.app.load(); s != nil && len(msg) > 0 {
		s.app.NotifyMsg(append([]byte(nil), msg...)) // memberlist reuses msg
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	if s := d.app.load(); s != nil {
		return s.queue.GetBroadcasts(overhead, limit)
	}
	return nil
}

func (d *delegate) LocalState(join bool) []byte {
	if s := d.app.load(); s != nil {
		return s.app.LocalState(join)
	}
	return nil
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if s := d.app.load(); s != nil && len(buf) > 0 {
		s.app.MergeRemoteState(append([]byte(nil), buf...), join)
	}
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.notify(EventJoin, n, StateAlive) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.notify(EventUpdate, n, StateAlive) }

// NotifyLeave is memberlist's word for both a goodbye and a death (its
// Node.State is never updated); the member's last metadata tells them apart.
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	if (*Membership)(d).member(n, StateLeft).Meta.Leaving {
		d.notify(EventLeave, n, StateLeft)
		return
	}
	d.notify(EventFail, n, StateDead)
}

func (d *delegate) notify(kind EventKind, n *memberlist.Node, state State) {
	mem := (*Membership)(d).member(n, state)
	d.mu.Lock()
	d.members[mem.Name] = mem
	d.mu.Unlock()
	d.metrics.events.WithLabelValues(kind.String()).Inc()
	d.queue.push(Event{Kind: kind, Member: mem})
}

// NotifyAlive keeps out a node whose metadata does not decode: an agent of
// an incompatible version, whatever its certificate says.
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	var meta Meta
	if err := json.Unmarshal(n.Meta, &meta); err != nil || meta.Addr == "" {
		d.metrics.rejected.Inc()
		err = fmt.Errorf("gossip: member %s has unreadable metadata %q: %v", n.Name, n.Meta, err)
		d.log.Warn("gossip: refused member", "member", n.Name, "err", err)
		return err
	}
	return nil
}
