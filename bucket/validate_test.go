package bucket_test

import "github.com/floodgate-go/floodgate/bucket"

// validate is the configuration check of Config.Algorithm.
func validate(c bucket.Config) error {
	_, err := c.Algorithm()
	return err
}
