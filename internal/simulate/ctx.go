package simulate

import "context"

// bg is the context of simulated requests: the simulation never waits.
var bg = context.Background()
