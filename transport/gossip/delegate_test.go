package gossip

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	dto "github.com/prometheus/client_model/go"
)

// A member whose metadata does not decode (an incompatible agent) is kept
// out, with a log line and a count.
func TestAliveRefusesUnreadableMeta(t *testing.T) {
	var logs bytes.Buffer
	m := &Membership{log: slog.New(slog.NewTextHandler(&logs, nil)), metrics: newMetrics(), members: map[string]Member{}}
	d := (*delegate)(m)
	if err := d.NotifyAlive(&memberlist.Node{Name: "good", Meta: []byte(`{"addr":"127.0.0.9:7946","cap":1}`)}); err != nil {
		t.Fatalf("good metadata refused: %v", err)
	}
	for _, meta := range []string{"", "garbage", `{"cap":1}`} {
		if err := d.NotifyAlive(&memberlist.Node{Name: "odd", Meta: []byte(meta)}); err == nil {
			t.Fatalf("metadata %q accepted", meta)
		}
	}
	var c dto.Metric
	m.metrics.rejected.Write(&c)
	if c.GetCounter().GetValue() != 3 || !strings.Contains(logs.String(), "refused member") {
		t.Fatalf("refusals: %v counted, log:\n%s", c.GetCounter().GetValue(), logs.String())
	}
}

func TestMemberlistLogLevels(t *testing.T) {
	var logs bytes.Buffer
	w := &levelWriter{log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	w.Write([]byte("[WARN] memberlist: Was able to connect to n2 over TCP but UDP probes failed\n"))
	w.Write([]byte("[DEBUG] memberlist: Stream connection from=127.0.0.2:1\n"))
	out := logs.String()
	if !strings.Contains(out, `level=WARN msg="memberlist: Was able`) || !strings.Contains(out, "level=DEBUG") {
		t.Fatalf("levels not mapped:\n%s", out)
	}
}
