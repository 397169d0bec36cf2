// Package client talks to a kvmesh agent on this node over its Unix socket.
package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	kvmeshv1 "github.com/kvmesh/kvmesh/proto/kvmesh/v1"
)

// maxMessage bounds one inline message; blocks larger than the agent's
// limit are refused by the agent with a per-key error first.
const maxMessage = 1 << 30

// Client is a connection to one agent. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	rpc  kvmeshv1.StoreClient
}

// Dial connects to the agent listening on the Unix socket at path.
func Dial(path string) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("agent socket %s: %w", path, err)
	}
	return &Client{conn: conn, rpc: kvmeshv1.NewStoreClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// RPC is the generated client, for the operations this package does not wrap.
func (c *Client) RPC() kvmeshv1.StoreClient { return c.rpc }

// KeyError is a per-key failure reported by the agent.
type KeyError struct {
	Code int64 // negative code from docs/errors.md
	Msg  string
}

func (e *KeyError) Error() string { return e.Msg }

// NotFound is the code of a miss.
const NotFound = -1

func check(r *kvmeshv1.Result) error {
	if r.GetValue() < 0 {
		return &KeyError{Code: r.GetValue(), Msg: r.GetError()}
	}
	return nil
}

// Put stores value under key in namespace ns ("" for the default one).
func (c *Client) Put(ctx context.Context, ns string, key, value []byte, d kvmeshv1.Durability) error {
	resp, err := c.rpc.Put(ctx, &kvmeshv1.PutRequest{Namespace: ns, Key: key, Value: value, Durability: d})
	if err != nil {
		return err
	}
	return check(resp.Result)
}

// Get returns the value under key; a miss is a *KeyError with Code NotFound.
func (c *Client) Get(ctx context.Context, ns string, key []byte) ([]byte, error) {
	resp, err := c.rpc.Get(ctx, &kvmeshv1.GetRequest{Namespace: ns, Key: key})
	if err != nil {
		return nil, err
	}
	return resp.Value, check(resp.Result)
}

// Exist reports, per key, whether the agent holds it.
func (c *Client) Exist(ctx context.Context, ns string, keys [][]byte) ([]bool, error) {
	resp, err := c.rpc.Exist(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return nil, err
	}
	return resp.Exists, nil
}

// Query returns the length of the longest leading run of keys held.
func (c *Client) Query(ctx context.Context, ns string, keys [][]byte) (int, error) {
	resp, err := c.rpc.Query(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return 0, err
	}
	return int(resp.Present), nil
}

// Remove deletes keys; each key's outcome is in the returned slice (nil for
// success).
func (c *Client) Remove(ctx context.Context, ns string, keys [][]byte) ([]error, error) {
	resp, err := c.rpc.Remove(ctx, &kvmeshv1.KeysRequest{Namespace: ns, Keys: keys})
	if err != nil {
		return nil, err
	}
	out := make([]error, len(resp.Results))
	for i, r := range resp.Results {
		out[i] = check(r)
	}
	return out, nil
}

// Members lists the cluster as the agent sees it (empty in single-node
// mode).
func (c *Client) Members(ctx context.Context) (*kvmeshv1.MembersResponse, error) {
	return c.rpc.Members(ctx, &kvmeshv1.MembersRequest{})
}

// Stat returns the agent's statistics.
func (c *Client) Stat(ctx context.Context) (*kvmeshv1.StatResponse, error) {
	return c.rpc.Stat(ctx, &kvmeshv1.StatRequest{})
}
