package mono

import "time"

// epoch is the process's start, with both readings.
var epoch = time.Now()

// Now returns the time now from one read of the monotonic clock.
func Now() time.Time { return epoch.Add(time.Since(epoch)) }
