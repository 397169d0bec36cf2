package mesh

import (
	"time"

	"github.com/kvmesh/kvmesh/transport/gossip"
)

// rejoinLoop heals partitions. Memberlist push-pulls only with live
// members, and gossips to a dead one only while it has broadcasts queued
// and for GossipToTheDeadTime after the death (2 s under the Local
// preset, 30 s under LAN), then forgets it: once a partition outlasts
// that, each side has declared the other dead and nothing would ever
// bring them back together. So, as Serf's reconnect does, every
// PushPullInterval this node joins the members it has seen die (not those
// that left): a full state sync with each that answers, after which both
// sides refute their deaths and meet again as joins.
func (n *Node) rejoinLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Gossip.PushPullInterval)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		var dead []string
		for _, m := range n.ms.All() {
			if m.State == gossip.StateDead && m.Name != n.Self() {
				dead = append(dead, m.Addr)
			}
		}
		if len(dead) == 0 {
			continue
		}
		if k, err := n.ms.Join(dead); err == nil {
			n.log.Info("mesh: reached members declared dead", "answered", k, "tried", dead)
		} else {
			n.log.Debug("mesh: members declared dead still unreachable", "tried", dead, "err", err)
		}
	}
}
