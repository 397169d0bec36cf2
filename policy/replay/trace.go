// Package replay is the trace-replay lab: it runs eviction and admission
// policies, native or wasm, over request traces in the Mooncake (FAST'25)
// JSONL format and measures hit rate, disk writes and decision cost, beside
// LRU and Belady's offline optimum at the same capacity.
package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Request is one line of a Mooncake trace. Its hash ids name 512-token
// blocks and are chained: equal ids mean equal prefixes.
type Request struct {
	Timestamp    int64    `json:"timestamp"` // ms since the trace began
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// LoadTrace reads a trace file.
func LoadTrace(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	trace, err := ReadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return trace, nil
}

// ReadTrace reads a trace: one JSON request per line, in time order.
func ReadTrace(r io.Reader) ([]Request, error) {
	var trace []Request
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; s.Scan(); line++ {
		if len(s.Bytes()) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(s.Bytes(), &req); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if n := len(trace); n > 0 && req.Timestamp < trace[n-1].Timestamp {
			return nil, fmt.Errorf("line %d: timestamp %d goes back in time", line, req.Timestamp)
		}
		trace = append(trace, req)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(trace) == 0 {
		return nil, fmt.Errorf("no requests")
	}
	return trace, nil
}

// WriteTrace writes trace in the format ReadTrace reads.
func WriteTrace(w io.Writer, trace []Request) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range trace {
		if err := enc.Encode(&trace[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}
