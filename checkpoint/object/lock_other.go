//go:build !unix

package object

import (
	"errors"
	"os"
)

func lockFile(*os.File) error {
	return errors.New("the file backend's conditional writes need flock, which this system lacks")
}
