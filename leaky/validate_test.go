package leaky_test

import "github.com/floodgate-go/floodgate/leaky"

// validate is the configuration check of Config.Algorithm.
func validate(c leaky.Config) error {
	_, err := c.Algorithm()
	return err
}
