package sdk

// IDTable maps block ids to int32 slots. It is an open-addressing hash table
// with linear probing: in a guest every loop iteration is a deadline check
// (an exit to the host), so a lookup that usually ends at its first probe
// is several times cheaper there than Go's built-in map.
//
// Id 0 is reserved (the ABI never uses it for a block) and cannot be stored.
type IDTable struct {
	keys []uint64
	vals []int32
	n    int
	mask uint64
}

// NewIDTable returns a table sized for about hint ids.
func NewIDTable(hint int) *IDTable {
	size := 16
	for size < 2*hint {
		size <<= 1
	}
	return &IDTable{keys: make([]uint64, size), vals: make([]int32, size), mask: uint64(size - 1)}
}

// Len is the number of ids stored.
func (t *IDTable) Len() int { return t.n }

func (t *IDTable) home(id uint64) uint64 {
	// Fibonacci hashing spreads the store's sequential ids over the table.
	return (id * 0x9E3779B97F4A7C15) >> 32 & t.mask
}

// Get returns the slot stored for id.
func (t *IDTable) Get(id uint64) (int32, bool) {
	if id == 0 {
		return 0, false
	}
	i := t.home(id)
	for t.keys[i] != id {
		if t.keys[i] == 0 {
			return 0, false
		}
		i = (i + 1) & t.mask
	}
	return t.vals[i], true
}

// Put stores slot for id, replacing any earlier one.
func (t *IDTable) Put(id uint64, slot int32) {
	if id == 0 {
		return
	}
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	for i := t.home(id); ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case id:
			t.vals[i] = slot
			return
		case 0:
			t.keys[i], t.vals[i] = id, slot
			t.n++
			return
		}
	}
}

// Delete removes id, if present.
func (t *IDTable) Delete(id uint64) {
	if id == 0 {
		return
	}
	i := t.home(id)
	for ; t.keys[i] != id; i = (i + 1) & t.mask {
		if t.keys[i] == 0 {
			return
		}
	}
	// Backward-shift deletion keeps every probe chain unbroken without
	// tombstones.
	for j := (i + 1) & t.mask; t.keys[j] != 0; j = (j + 1) & t.mask {
		h := t.home(t.keys[j])
		if (j-h)&t.mask >= (j-i)&t.mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i], t.vals[i] = 0, 0
	t.n--
}

func (t *IDTable) grow() {
	keys, vals := t.keys, t.vals
	t.keys = make([]uint64, 2*len(keys))
	t.vals = make([]int32, 2*len(keys))
	t.mask = uint64(len(t.keys) - 1)
	t.n = 0
	for i, k := range keys {
		if k != 0 {
			t.Put(k, vals[i])
		}
	}
}
