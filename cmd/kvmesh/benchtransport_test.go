package main

import (
	"encoding/json"
	"testing"
)

// TestBenchTransport runs `bench transport` small, both ways, and checks
// that every transport moved its blocks (each verified by its receiver).
func TestBenchTransport(t *testing.T) {
	for _, op := range []string{"get", "put"} {
		out, err := stdout(t, func() error {
			return benchTransport([]string{"--json", "--op", op, "--total", "4194304", "--block-size", "262144", "--inflight", "3", "--conns", "2", "--rounds", "1"})
		})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var res struct {
			QUIC    float64              `json:"quic_gbps"`
			TLS     float64              `json:"tls_tcp_gbps"`
			TCP     float64              `json:"tcp_gbps"`
			Samples map[string][]float64 `json:"samples_gbps"`
			Blocks  int                  `json:"blocks"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: %v in %q", op, err, out)
		}
		if res.QUIC <= 0 || res.TLS <= 0 || res.TCP <= 0 || res.Blocks != 16 || len(res.Samples["quic"]) != 1 {
			t.Fatalf("%s: %s", op, out)
		}
	}
}
