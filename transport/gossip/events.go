package gossip

import "sync"

// eventQueue hands events from memberlist's callbacks, which must not
// block, to a channel in order and without dropping any: it buffers as
// many as the reader lags behind.
type eventQueue struct {
	out  chan Event
	wake chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	pending []Event
}

func newEventQueue() *eventQueue {
	q := &eventQueue{out: make(chan Event), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close drops what is pending and closes out.
func (q *eventQueue) close() { q.once.Do(func() { close(q.done) }) }

func (q *eventQueue) run() {
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.done:
				return
			}
		}
		e := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		select {
		case q.out <- e:
		case <-q.done:
			return
		}
	}
}
