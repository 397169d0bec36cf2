package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvmesh/kvmesh/policy"
)

const policyUsage = `usage:
  kvmesh policy push FILE.wasm --slot admission|eviction|prefetch [--tier memory|disk]
  kvmesh policy ls [--json]
  kvmesh policy rollback --slot S [--tier memory|disk]
(each also takes --admin-addr and --admin-token)`

// runPolicy manages the policy modules of an agent through its admin API.
func runPolicy(args []string) error {
	if len(args) == 0 {
		return errors.New(policyUsage)
	}
	switch args[0] {
	case "push":
		return policyPush(args[1:])
	case "ls":
		return policyList(args[1:])
	case "rollback":
		return policyRollback(args[1:])
	}
	return fmt.Errorf("unknown policy command %q\n%s", args[0], policyUsage)
}

// adminFlags are how a policy command reaches the agent.
type adminFlags struct {
	addr, token string
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.addr, "admin-addr", "127.0.0.1:7070", "the agent's admin HTTP address")
	fs.StringVar(&a.token, "admin-token", os.Getenv("KVMESH_ADMIN_TOKEN"), "bearer token of the admin API (default $KVMESH_ADMIN_TOKEN)")
}

func (a adminFlags) call(method, path string, query url.Values, body []byte, out any) error {
	u := url.URL{Scheme: "http", Host: a.addr, Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequest(method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/wasm")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	// An upload is compiled and dry-run before the answer: allow for it.
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	return json.Unmarshal(raw, out)
}

func slotQuery(slot, tier string) url.Values {
	q := url.Values{"slot": {slot}}
	if tier != "" {
		q.Set("tier", tier)
	}
	return q
}

func policyPush(args []string) error {
	var admin adminFlags
	fs := flag.NewFlagSet("policy push", flag.ContinueOnError)
	admin.register(fs)
	slot := fs.String("slot", "", "admission, eviction or prefetch")
	tier := fs.String("tier", "", "memory or disk (eviction only; default memory)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	files := fs.Args()
	if len(files) != 1 || *slot == "" {
		return errors.New(policyUsage)
	}
	wasm, err := os.ReadFile(files[0])
	if err != nil {
		return err
	}
	var res policy.PushResult
	if err := admin.call("POST", "/v1/policies", slotQuery(*slot, *tier), wasm, &res); err != nil {
		return err
	}
	fmt.Printf("%s is active in the %s slot (module %s)\n", files[0], slotName(res.Slot, res.Tier), res.Digest)
	return nil
}

func policyRollback(args []string) error {
	var admin adminFlags
	fs := flag.NewFlagSet("policy rollback", flag.ContinueOnError)
	admin.register(fs)
	slot := fs.String("slot", "", "admission, eviction or prefetch")
	tier := fs.String("tier", "", "memory or disk (eviction only; default memory)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || *slot == "" {
		return errors.New(policyUsage)
	}
	var res policy.PushResult
	if err := admin.call("POST", "/v1/policies/rollback", slotQuery(*slot, *tier), nil, &res); err != nil {
		return err
	}
	if res.Digest == "" {
		fmt.Printf("the %s slot is back on its native policy\n", slotName(res.Slot, res.Tier))
	} else {
		fmt.Printf("the %s slot is back on module %s\n", slotName(res.Slot, res.Tier), res.Digest)
	}
	return nil
}

func policyList(args []string) error {
	var admin adminFlags
	fs := flag.NewFlagSet("policy ls", flag.ContinueOnError)
	admin.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New(policyUsage)
	}
	var list policy.Listing
	if err := admin.call("GET", "/v1/policies", nil, nil, &list); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(list)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tSTATE\tMODULE\tVERSION\tORIGIN\tSINCE\tROLLBACK TO")
	for _, s := range list.Slots {
		module, back := "native", ""
		if s.Active != "" {
			module = short(s.Active)
		}
		if len(s.History) > 0 {
			back = "native"
			if s.History[0] != "" {
				back = short(s.History[0])
			}
		}
		origin := s.Origin
		if origin == "" {
			origin = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", slotName(s.Slot, s.Tier), s.State, module, s.Version, origin, s.Since, back)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range list.Slots {
		if s.Error != "" {
			fmt.Printf("%s: %s\n", slotName(s.Slot, s.Tier), s.Error)
		}
		if r := s.Refused; r != nil {
			fmt.Printf("%s: refused module %s (version %d from %s): %s\n", slotName(s.Slot, s.Tier), short(r.Module), r.Version, r.Origin, r.Error)
		}
	}
	return nil
}

func slotName(slot, tier string) string {
	if tier != "" {
		return slot + "/" + tier
	}
	return slot
}

func short(digest string) string { return digest[:min(12, len(digest))] }
