//go:build tools

// Package tools records the commands hack/build-tools.sh builds from this module.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
