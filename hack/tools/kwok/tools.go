//go:build tools

// Package tools records the commands hack/bench-control-plane.sh builds from this module.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
