package node

import "container/list"

// lru holds values by key, the least recently used first to go: put drops the
// least recently used past the number it is given. It is not safe for concurrent use (its owner's
// mutex guards it). The status reads' kept folds (statusFolds) and the session
// feed's (sessionFeed.folds) are ones.
type lru[V any] struct {
	items map[string]*list.Element // of lruItem[V]
	order list.List                // the most recently used first
}

type lruItem[V any] struct {
	key string
	val V
}

// get returns the value of key, now the most recently used.
func (c *lru[V]) get(key string) (v V, ok bool) {
	el, ok := c.items[key]
	if !ok {
		return v, false
	}
	c.order.MoveToFront(el)
	return el.Value.(lruItem[V]).val, true
}

// peek returns the value of key, leaving the order as it is.
func (c *lru[V]) peek(key string) (v V, ok bool) {
	el, ok := c.items[key]
	if !ok {
		return v, false
	}
	return el.Value.(lruItem[V]).val, true
}

// put adds v as key's value, the most recently used (key must not be held), and
// returns the value dropped for it when c held max already.
func (c *lru[V]) put(key string, v V, max int) (dropped V, ok bool) {
	if c.items == nil {
		c.items = map[string]*list.Element{}
	}
	c.items[key] = c.order.PushFront(lruItem[V]{key, v})
	if c.order.Len() > max {
		_, dropped, ok = c.dropOldest()
	}
	return dropped, ok
}

// remove drops key.
func (c *lru[V]) remove(key string) {
	if el, ok := c.items[key]; ok {
		c.order.Remove(el)
		delete(c.items, key)
	}
}

// dropOldest drops the least recently used, and returns it.
func (c *lru[V]) dropOldest() (key string, v V, ok bool) {
	el := c.order.Back()
	if el == nil {
		return "", v, false
	}
	it := el.Value.(lruItem[V])
	c.order.Remove(el)
	delete(c.items, it.key)
	return it.key, it.val, true
}

func (c *lru[V]) len() int { return c.order.Len() }
