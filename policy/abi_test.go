package policy

import (
	"encoding/binary"
	"strings"
	"testing"
)

// TestEventRecordLayout checks putEvent against the layout in
// docs/policy-abi.md.
func TestEventRecordLayout(t *testing.T) {
	t.Parallel()
	b := make([]byte, eventRecordSize)
	for i := range b {
		b[i] = 0xAA // reserved bytes must come out zero
	}
	putEvent(b, &Event{Time: -5, ID: 42, Parent: 41, Size: 1 << 21, Tokens: 512, ChainPos: 7, Kind: EventDemote, Tier: TierDisk})
	le := binary.LittleEndian
	if int64(le.Uint64(b[0:])) != -5 || le.Uint64(b[8:]) != 42 || le.Uint64(b[16:]) != 41 || le.Uint64(b[24:]) != 1<<21 ||
		le.Uint32(b[32:]) != 512 || le.Uint32(b[36:]) != 7 || b[40] != byte(EventDemote) || b[41] != byte(TierDisk) {
		t.Fatalf("record %x", b)
	}
	for i := 42; i < eventRecordSize; i++ {
		if b[i] != 0 {
			t.Fatalf("reserved byte %d is %#x", i, b[i])
		}
	}
}

func TestReadDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rec  []byte
		want Decision
		err  string
	}{
		{[]byte{1, 2, 1, 0}, Decision{Disk: DiskNow, Replicas: 2, Ack: DurableDisk}, ""},
		{[]byte{2, 0, 0, 0}, Decision{Disk: DiskNever}, ""},
		{[]byte{3, 0, 0, 0}, Decision{}, "disk write mode 3 out of range"},
		{[]byte{0, 17, 0, 0}, Decision{}, "17 replicas"},
		{[]byte{0, 0, 3, 0}, Decision{}, "durability 3 out of range"},
		{[]byte{0, 0, 0, 9}, Decision{}, "reserved byte is 9"},
	}
	for _, tc := range tests {
		got, err := readDecision(tc.rec)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%v: %+v, %v; want %+v", tc.rec, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one saying %q", tc.rec, err, tc.err)
		}
	}
}
