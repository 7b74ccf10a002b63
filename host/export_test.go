package host

// BellRings reports whether c's shared-memory transport has seen the
// agent's ring end a sleep, so that its long waits sleep until the ring.
func BellRings(c *Client) bool {
	t, ok := c.t.(*shmTransport)
	return ok && t.bellRings.Load()
}
