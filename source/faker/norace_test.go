//go:build !race

package faker_test

const raceEnabled = false
