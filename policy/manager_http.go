package policy

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxModuleBytes bounds an upload; a Go-built policy is about 2 MB.
const maxModuleBytes = 32 << 20

// Handler serves the admin API under /v1/policies:
//
//	GET  /v1/policies                               the slots and stored modules (no token needed)
//	POST /v1/policies?slot=S[&tier=T]               body: a .wasm module; validate, store, activate
//	POST /v1/policies/rollback?slot=S[&tier=T]      go back to the slot's previous module
//
// The POSTs need "Authorization: Bearer TOKEN"; without a configured token
// they are refused with 401. Answers are JSON; errors are {"error": "..."}.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/policies", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.List())
	})
	mux.HandleFunc("POST /v1/policies", m.authorized(m.servePush))
	mux.HandleFunc("POST /v1/policies/rollback", m.authorized(m.serveRollback))
	return mux
}

func (m *Manager) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if m.cfg.Token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvmesh"`)
			writeError(w, http.StatusUnauthorized, errors.New("policy changes are disabled: the agent has no admin token (--admin-token or KVMESH_ADMIN_TOKEN)"))
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(m.cfg.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvmesh"`)
			writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
			return
		}
		next(w, r)
	}
}

// PushResult is what a successful upload answers.
type PushResult struct {
	Digest string `json:"digest"`
	Slot   string `json:"slot"`
	Tier   string `json:"tier,omitempty"`
	// Version orders the activation cluster-wide; Origin is this agent
	// (empty in single-node mode).
	Version uint64 `json:"version,omitempty"`
	Origin  string `json:"origin,omitempty"`
}

func (m *Manager) servePush(w http.ResponseWriter, r *http.Request) {
	slot, tier, err := slotParams(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	wasm, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxModuleBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("module larger than %d bytes", maxModuleBytes))
			return
		}
		writeError(w, http.StatusBadRequest, err)
		return
	}
	rec, err := m.push(r.Context(), wasm, slot, tier)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, PushResult{Digest: rec.Module, Slot: slot.String(), Tier: tierParam(slot, tier), Version: rec.Version, Origin: rec.Origin})
}

func (m *Manager) serveRollback(w http.ResponseWriter, r *http.Request) {
	slot, tier, err := slotParams(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	rec, err := m.rollback(r.Context(), slot, tier)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, PushResult{Digest: rec.Module, Slot: slot.String(), Tier: tierParam(slot, tier), Version: rec.Version, Origin: rec.Origin})
}

func slotParams(r *http.Request) (Slot, Tier, error) {
	q := r.URL.Query()
	slot, err := ParseSlot(q.Get("slot"))
	if err != nil {
		return 0, 0, err
	}
	tier := TierMemory
	if t := q.Get("tier"); t != "" {
		if slot != SlotEviction {
			return 0, 0, fmt.Errorf("a tier applies to the eviction slot only")
		}
		if tier, err = ParseTier(t); err != nil {
			return 0, 0, err
		}
	}
	return slot, tier, nil
}

func tierParam(s Slot, t Tier) string {
	if s == SlotEviction {
		return t.String()
	}
	return ""
}

func statusOf(err error) int {
	var re *RequestError
	if errors.As(err, &re) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
