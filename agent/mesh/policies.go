package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/policy"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/transport/frame"
)

// Cluster-wide policies. Every push or rollback on any agent is a
// policy.Record (slot, module digest, Lamport version, origin). Each node
// keeps the newest record it has heard of per slot and gossips them: a
// broadcast when it learns or makes one, and its whole set in every
// push/pull sync, so a joiner, a restarted agent and both sides of a
// healed partition converge. A worker hands each record newer than the
// local slot to policy.Manager.Apply, which fetches a missing module by
// digest over opPolicyModule (from the announcer, then the origin, then
// any live member), checks its SHA-256, validates it as an upload and
// activates it. A refused module is remembered by the manager and not
// tried again; a failed fetch is retried with backoff.

const (
	// policyMsgKind is the first byte of the policy gossip messages.
	policyMsgKind = 'P'
	// maxPolicyModule bounds a fetched module (the admin API's upload
	// limit).
	maxPolicyModule = 32 << 20
	// policyFetchTimeout bounds fetching a module from one member.
	policyFetchTimeout = 30 * time.Second
	// policyRetryMax caps the backoff between fetch attempts.
	policyRetryMax = 30 * time.Second
)

// heardRecord is a record and a member that should hold its module.
type heardRecord struct {
	policy.Record
	From string `json:"from,omitempty"`
}

// policyMsg is a broadcast (one record) or a node's whole state (one per
// slot ever changed).
type policyMsg struct {
	Records []heardRecord `json:"records"`
}

func encodePolicyMsg(rs []heardRecord) []byte {
	b, _ := json.Marshal(policyMsg{Records: rs})
	return append([]byte{policyMsgKind}, b...)
}

func decodePolicyMsg(b []byte) ([]heardRecord, error) {
	if len(b) == 0 || b[0] != policyMsgKind {
		return nil, errors.New("not a policy message")
	}
	var m policyMsg
	if err := json.Unmarshal(b[1:], &m); err != nil {
		return nil, err
	}
	return m.Records, nil
}

// policySync spreads a policy.Manager's activations over the mesh; it is
// the membership's gossip.App.
type policySync struct {
	n   *Node
	mgr *policy.Manager
	log *slog.Logger

	mu    sync.Mutex
	heard map[string]heardRecord // by slot: the newest record heard of or made here
	inbox [][]byte               // gossip to look at, from memberlist's callbacks
	retry map[string]retryState  // by slot: fetches that failed
	kick  chan struct{}
}

type retryState struct {
	version  uint64 // of the record that failed
	origin   string
	attempts int
	next     time.Time
}

// SharePolicies makes mgr's slots cluster-wide: its pushes and rollbacks
// reach every member, and theirs reach it. Call it once, right after
// Start.
func (n *Node) SharePolicies(mgr *policy.Manager) {
	ps := &policySync{n: n, mgr: mgr, log: n.log.With("component", "policy-sync"),
		heard: map[string]heardRecord{}, retry: map[string]retryState{}, kick: make(chan struct{}, 1)}
	for _, r := range mgr.Records() {
		ps.heard[r.Slot] = heardRecord{Record: r, From: n.Self()}
	}
	n.ep.Handle(opPolicyModule, transport.HandlerFunc(ps.serveModule))
	mgr.SetCluster(n.Self(), ps.local)
	n.ms.SetApp(ps)
	n.wg.Add(1)
	go ps.run()
	if len(n.cfg.Join) > 0 {
		// The background join may have synced with a seed before the
		// state above was there: sync again so this node learns the
		// cluster's policies now rather than at the next periodic sync.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			select {
			case <-n.done:
			default:
				n.ms.Join(n.cfg.Join)
			}
		}()
	}
}

// local is told of every push and rollback made on this agent.
func (ps *policySync) local(r policy.Record) {
	h := heardRecord{Record: r, From: ps.n.Self()}
	ps.mu.Lock()
	if cur, ok := ps.heard[r.Slot]; !ok || r.After(cur.Record) {
		ps.heard[r.Slot] = h
	}
	ps.mu.Unlock()
	ps.broadcast(h)
}

func (ps *policySync) broadcast(h heardRecord) {
	if err := ps.n.ms.Broadcast("policy/"+h.Slot, encodePolicyMsg([]heardRecord{h})); err != nil {
		ps.log.Warn("policy broadcast not queued", "slot", h.Slot, "err", err)
	}
}

// The gossip.App side: memberlist's callbacks only queue.

func (ps *policySync) NotifyMsg(msg []byte)                   { ps.enqueue(msg) }
func (ps *policySync) MergeRemoteState(buf []byte, join bool) { ps.enqueue(buf) }

func (ps *policySync) LocalState(join bool) []byte {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.heard) == 0 {
		return nil
	}
	rs := make([]heardRecord, 0, len(ps.heard))
	for _, h := range ps.heard {
		rs = append(rs, h)
	}
	return encodePolicyMsg(rs)
}

func (ps *policySync) enqueue(b []byte) {
	ps.mu.Lock()
	if len(ps.inbox) < 1024 { // a flood is dropped; the periodic syncs repeat it
		ps.inbox = append(ps.inbox, b)
	}
	ps.mu.Unlock()
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// run learns what gossip brought and applies what is newer than the
// local slots, until the node stops.
func (ps *policySync) run() {
	defer ps.n.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-ps.n.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(time.Second) // retries fall due
	defer tick.Stop()
	for {
		select {
		case <-ps.n.done:
			return
		case <-ps.kick:
		case <-tick.C:
		}
		ps.mu.Lock()
		inbox := ps.inbox
		ps.inbox = nil
		ps.mu.Unlock()
		for _, b := range inbox {
			rs, err := decodePolicyMsg(b)
			if err != nil {
				ps.log.Warn("unreadable policy gossip", "err", err)
				continue
			}
			for _, h := range rs {
				ps.learn(h)
			}
		}
		ps.applyDue(ctx)
	}
}

// learn keeps h if it is the newest record heard of for its slot, and
// passes it on.
func (ps *policySync) learn(h heardRecord) {
	if !ps.mgr.Newer(h.Record) { // unknown slot, or nothing new here
		return
	}
	ps.mu.Lock()
	cur, ok := ps.heard[h.Slot]
	newer := !ok || h.After(cur.Record)
	if newer {
		ps.heard[h.Slot] = h
	}
	ps.mu.Unlock()
	if newer {
		ps.mgr.Observe(h.Version)
		ps.broadcast(h) // epidemic: each member passes a new record on once
	}
}

// applyDue applies every heard record newer than its slot whose retry is
// due.
func (ps *policySync) applyDue(ctx context.Context) {
	ps.mu.Lock()
	todo := make([]heardRecord, 0, len(ps.heard))
	for _, h := range ps.heard {
		todo = append(todo, h)
	}
	ps.mu.Unlock()
	for _, h := range todo {
		if ctx.Err() != nil {
			return
		}
		if !ps.mgr.Newer(h.Record) {
			continue
		}
		ps.mu.Lock()
		rt, failed := ps.retry[h.Slot]
		if failed && (rt.version != h.Version || rt.origin != h.Origin) {
			failed, rt = false, retryState{}
		}
		ps.mu.Unlock()
		if failed && time.Now().Before(rt.next) {
			continue
		}
		err := ps.mgr.Apply(ctx, h.Record, ps.fetcher(h))
		ps.mu.Lock()
		switch {
		case err == nil || policy.IsRefused(err): // the manager logged a refusal
			delete(ps.retry, h.Slot)
			if cur := ps.heard[h.Slot]; err == nil && cur.Version == h.Version && cur.Origin == h.Origin {
				cur.From = ps.n.Self() // this node holds the module now
				ps.heard[h.Slot] = cur
			}
		case ctx.Err() == nil:
			rt.version, rt.origin = h.Version, h.Origin
			rt.attempts++
			rt.next = time.Now().Add(min(time.Second<<min(rt.attempts-1, 5), policyRetryMax))
			ps.retry[h.Slot] = rt
			level := slog.LevelWarn
			if rt.attempts > 1 {
				level = slog.LevelDebug
			}
			ps.log.Log(ctx, level, "policy from the cluster not applied yet; retrying", "slot", h.Slot, "module", h.Module,
				"version", h.Version, "origin", h.Origin, "attempts", rt.attempts, "err", err)
		}
		ps.mu.Unlock()
	}
}

// fetcher fetches a module from h.From, then h.Origin, then every other
// live member in random order.
func (ps *policySync) fetcher(h heardRecord) policy.Fetcher {
	return func(ctx context.Context, digest string) ([]byte, string, error) {
		v := ps.n.view()
		names := []string{h.From, h.Origin}
		for _, i := range rand.Perm(len(v.names)) {
			names = append(names, v.names[i])
		}
		tried := map[string]bool{ps.n.Self(): true, "": true}
		var errs []error
		for _, name := range names {
			if tried[name] {
				continue
			}
			tried[name] = true
			wasm, err := ps.fetchFrom(ctx, v, name, digest)
			if err == nil {
				if sum := sha256.Sum256(wasm); hex.EncodeToString(sum[:]) == digest {
					return wasm, name, nil
				}
				err = errors.New("bytes do not match the digest")
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			if ctx.Err() != nil {
				break
			}
		}
		if len(errs) == 0 {
			return nil, "", errors.New("no other live member to fetch from")
		}
		return nil, "", errors.Join(errs...)
	}
}

// fetchFrom asks one member for a module.
func (ps *policySync) fetchFrom(ctx context.Context, v *view, name, digest string) ([]byte, error) {
	addr, ok := v.addr[name]
	if !ok {
		return nil, &frame.Error{Status: frame.StatusUnavailable, Msg: name + " is not a live member"}
	}
	ctx, cancel := context.WithTimeout(ctx, policyFetchTimeout)
	defer cancel()
	var wasm []byte
	resp, err := ps.n.ep.Do(ctx, addr, transport.Call{Op: opPolicyModule, Key: []byte(digest)})
	if err == nil {
		if resp.Length > maxPolicyModule {
			err = &frame.Error{Status: frame.StatusTooLarge, Msg: "module larger than the upload limit"}
		} else {
			wasm = make([]byte, resp.Length)
			err = resp.Fill(wasm)
		}
		resp.Close()
	}
	outcome := "ok"
	if err != nil {
		outcome = frame.StatusOf(err).String()
	}
	ps.n.metrics.remote.WithLabelValues("policy_module", outcome).Inc()
	return wasm, err
}

// serveModule answers opPolicyModule from the manager's stored modules.
func (ps *policySync) serveModule(_ context.Context, req *transport.Request, w *transport.ResponseWriter) {
	wasm, err := ps.mgr.ModuleBytes(string(req.Key))
	switch {
	case errors.Is(err, os.ErrNotExist):
		w.Error(&frame.Error{Status: frame.StatusNotFound, Msg: "module not held here"})
	case err != nil:
		w.Error(&frame.Error{Status: frame.StatusBadFrame, Msg: err.Error()})
	default:
		w.Send(frame.StatusOK, transport.Bytes(wasm))
	}
}
