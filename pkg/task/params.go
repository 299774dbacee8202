/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package task

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The tunable params that config-snapshot sets and the committer reads. Each
// is parsed here, so that the controller refuses what the committer would.

// Defaults of the tunable params, of the committer's flags and of the
// config-snapshot keys of the same names.
const (
	DefaultMaxPause         = 20 * time.Second
	DefaultKeepLocal        = false
	DefaultKeepLocalMaxSize = "20Gi"
	// DefaultDiskReserve is kubelet's default nodefs.available eviction
	// threshold.
	DefaultDiskReserve = "10%"
)

// ParseMaxPause parses ParamMaxPause: a positive Go duration.
func ParseMaxPause(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 20s", v)
	}
	return d, nil
}

// ParseMaxLayers parses ParamMaxLayers: a whole number from 0 to MaxMaxLayers.
func ParseMaxLayers(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > MaxMaxLayers {
		return 0, fmt.Errorf("%q is not a whole number from 0 (never squash) to %d", v, MaxMaxLayers)
	}
	return n, nil
}

// ParseKeepLocal parses ParamKeepLocal: "true" or "false".
func ParseKeepLocal(v string) (bool, error) {
	switch strings.TrimSpace(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%q is neither \"true\" nor \"false\"", v)
}

// ParseKeepLocalMaxSize parses ParamKeepLocalMaxSize, a Kubernetes quantity
// of zero or more bytes, into bytes.
func ParseKeepLocalMaxSize(v string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%q is not a size such as 20Gi", v)
	}
	return q.Value(), nil
}

// DiskReserve is what a commit leaves free on each node filesystem it writes
// to: a share of the filesystem or a fixed size. The zero value is
// DefaultDiskReserve.
type DiskReserve struct {
	text    string  // as given; empty for DefaultDiskReserve
	percent float64 // of the filesystem; 0 for a size
	bytes   uint64  // 0 for a percentage
}

// defaultDiskReserve is DefaultDiskReserve parsed.
var defaultDiskReserve, _ = ParseDiskReserve(DefaultDiskReserve)

// ParseDiskReserve parses ParamDiskReserve: a percentage of the filesystem
// from 0% to 50% (kubelet's form of an eviction threshold, such as 10%), or a
// Kubernetes quantity of zero or more bytes (such as 20Gi).
func ParseDiskReserve(v string) (DiskReserve, error) {
	v = strings.TrimSpace(v)
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f >= 0 && f <= 50) {
			return DiskReserve{}, fmt.Errorf("%q is not a percentage from 0%% to 50%%, such as 10%%", v)
		}
		return DiskReserve{text: v, percent: f}, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return DiskReserve{}, fmt.Errorf("%q is neither a percentage such as 10%% nor a size such as 20Gi", v)
	}
	return DiskReserve{text: v, bytes: uint64(q.Value())}, nil
}

// Of returns the bytes to leave free on a filesystem of total bytes.
func (r DiskReserve) Of(total uint64) uint64 {
	if r.text == "" {
		r = defaultDiskReserve
	}
	return r.bytes + uint64(float64(total)*r.percent/100)
}

// String returns r as given to ParseDiskReserve.
func (r DiskReserve) String() string {
	if r.text == "" {
		return DefaultDiskReserve
	}
	return r.text
}

// ParseMemoryRestoreBase parses ParamMemoryRestoreBase: empty (none), or an
// image reference with its registry, pinned by digest
// ("registry/repository@sha256:...").
func ParseMemoryRestoreBase(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	d, err := name.NewDigest(v, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("%q is not an image pinned by digest, such as registry.example.com/restore-base@sha256:<64 hex digits>: %v", v, err)
	}
	return d.String(), nil
}

// ParseMemoryAnonymousPull parses ParamMemoryAnonymousPull:
// MemoryAnonymousPullRefuse (also when empty) or MemoryAnonymousPullAllow.
func ParseMemoryAnonymousPull(v string) (bool, error) {
	switch strings.TrimSpace(v) {
	case "", MemoryAnonymousPullRefuse:
		return false, nil
	case MemoryAnonymousPullAllow:
		return true, nil
	}
	return false, fmt.Errorf("%q is neither %q nor %q", v, MemoryAnonymousPullRefuse, MemoryAnonymousPullAllow)
}
