package store

// Result is the outcome of one key of a batch: bytes moved, or an error.
type Result struct {
	Bytes uint64
	Err   error
}

// Value is the result as clients see it: bytes moved (>= 0) or a negative
// Code.
func (r Result) Value() int64 {
	if r.Err != nil {
		return int64(CodeOf(r.Err))
	}
	return int64(r.Bytes)
}

// PutItem is one key of a BatchPut.
type PutItem struct {
	Key   []byte
	Value [][]byte
	Opts  PutOptions
}

// BatchPut stores each item, independently: one item's failure does not
// stop the others.
func (s *Store) BatchPut(ns string, items []PutItem) []Result {
	out := make([]Result, len(items))
	for i, it := range items {
		out[i].Err = s.Put(ns, it.Key, it.Value, it.Opts)
		if out[i].Err == nil {
			for _, p := range it.Value {
				out[i].Bytes += uint64(len(p))
			}
		}
	}
	return out
}

// GetItem is one key of a BatchGet.
type GetItem struct {
	Key []byte
	Dst [][]byte
}

// BatchGet reads each item, independently.
func (s *Store) BatchGet(ns string, items []GetItem) []Result {
	out := make([]Result, len(items))
	for i, it := range items {
		out[i].Bytes, out[i].Err = s.Get(ns, it.Key, it.Dst)
	}
	return out
}
