package transport

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

func receivePacket(t *testing.T, n *testNode) Packet {
	t.Helper()
	select {
	case p := <-n.Packets():
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no gossip packet arrived")
		return Packet{}
	}
}

// Small packets travel as datagrams, large ones on a stream; both arrive
// whole and name the sender's endpoint, even when sent before any
// connection existed.
func TestGossipPackets(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	small, large := randomBytes(t, 300), randomBytes(t, 50000)
	if err := a.SendPacket(b.Advertise(), small); err != nil {
		t.Fatal(err)
	}
	p := receivePacket(t, b)
	if !bytes.Equal(p.Data, small) || p.From.String() != a.Advertise() {
		t.Fatalf("got %d bytes from %v, want %d from %s", len(p.Data), p.From, len(small), a.Advertise())
	}
	if err := a.SendPacket(b.Advertise(), large); err != nil {
		t.Fatal(err)
	}
	if p := receivePacket(t, b); !bytes.Equal(p.Data, large) {
		t.Fatalf("large packet: got %d bytes, want %d", len(p.Data), len(large))
	}
	// b answers over the connection a opened.
	if err := b.SendPacket(a.Advertise(), small); err != nil {
		t.Fatal(err)
	}
	if p := receivePacket(t, a); !bytes.Equal(p.Data, small) {
		t.Fatal("reply packet garbled")
	}
	if err := a.SendPacket(b.Advertise(), make([]byte, MaxGossipPacket+1)); err == nil {
		t.Fatal("SendPacket accepted a packet over MaxGossipPacket")
	}
}

func TestGossipStreams(t *testing.T) {
	ca := newCA(t, "c")
	a, b := newNode(t, ca, "a", nil), newNode(t, ca, "b", nil)
	go func() {
		c := <-b.GossipStreams()
		defer c.Close()
		msg, _ := io.ReadAll(io.LimitReader(c, 5))
		c.Write(append(msg, " back"...))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := a.DialGossip(ctx, b.Advertise())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("hello"))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello back" {
		t.Fatalf("gossip stream echo: %q, %v", got, err)
	}
	if c.RemoteAddr().String() != b.Advertise() {
		t.Fatalf("RemoteAddr %v, want %s", c.RemoteAddr(), b.Advertise())
	}
}
