//go:build !race

package iceberg_test

const raceEnabled = false
