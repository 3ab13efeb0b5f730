package adaptive

import "container/heap"

// waiter is one request waiting for a slot.
type waiter struct {
	ch    chan *Token         // receives the token, or nil when evicted
	done  func(*Token, error) // or, for AcquireFunc, is called with it
	since int64               // when it was queued (Unix ns)
	rank  int
	share float64
	label string
	seq   uint64
	index int // position in the heap; -1 once out of it
}

// waitQueue is a heap of waiters: higher rank first, then by arrival (oldest
// first, or newest first when lifo).
type waitQueue struct {
	items []*waiter
	lifo  bool
}

func (q *waitQueue) Len() int { return len(q.items) }

func (q *waitQueue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if a.rank != b.rank {
		return a.rank > b.rank
	}
	if q.lifo {
		return a.seq > b.seq
	}
	return a.seq < b.seq
}

func (q *waitQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index = i
	q.items[j].index = j
}

func (q *waitQueue) Push(x any) {
	w := x.(*waiter)
	w.index = len(q.items)
	q.items = append(q.items, w)
}

func (q *waitQueue) Pop() any {
	n := len(q.items) - 1
	w := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	w.index = -1
	return w
}

func (q *waitQueue) len() int       { return len(q.items) }
func (q *waitQueue) push(w *waiter) { heap.Push(q, w) }
func (q *waitQueue) pop() *waiter   { return heap.Pop(q).(*waiter) }
func (q *waitQueue) remove(w *waiter) {
	heap.Remove(q, w.index)
}

// peek returns the waiter to serve next, or nil.
func (q *waitQueue) peek() *waiter {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// last returns the waiter that would be served last, or nil.
func (q *waitQueue) last() *waiter {
	var v *waiter
	for i, w := range q.items {
		if v == nil || !q.Less(i, v.index) {
			v = w
		}
	}
	return v
}
