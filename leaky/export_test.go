package leaky

// Algorithm is the leaky bucket's step, for the tests.
type Algorithm = algorithm

// ParseRate parses an nginx rate= value, for the tests.
var ParseRate = parseRate

// MilliRate is the rate in milli-requests per second, for the tests.
func MilliRate(c Config) (int64, error) { return c.milliRate() }

// UndelayedCapacity is how many requests pass undelayed from idle, for the
// tests.
func UndelayedCapacity(c Config) int64 { return c.undelayedCapacity() }
