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
	"strings"
	"testing"
	"time"
)

// TestParseTunableParams pins the bounds both the controller and the
// committer hold the tunable params to.
func TestParseTunableParams(t *testing.T) {
	dg := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		param, value string
		parse        func(string) (any, error)
		want         any // nil: refused
	}{
		{ParamMaxPause, "20s", maxPause, 20 * time.Second},
		{ParamMaxPause, " 1m30s ", maxPause, 90 * time.Second},
		{ParamMaxPause, "0s", maxPause, nil},
		{ParamMaxPause, "-5s", maxPause, nil},
		{ParamMaxPause, "20", maxPause, nil},
		{ParamMaxLayers, "0", maxLayers, 0},
		{ParamMaxLayers, "128", maxLayers, 128},
		{ParamMaxLayers, "129", maxLayers, nil},
		{ParamMaxLayers, "-1", maxLayers, nil},
		{ParamMaxLayers, "four", maxLayers, nil},
		{ParamKeepLocal, "true", keepLocal, true},
		{ParamKeepLocal, "false", keepLocal, false},
		{ParamKeepLocal, "yes", keepLocal, nil},
		{ParamKeepLocal, "True", keepLocal, nil},
		{ParamKeepLocalMaxSize, "20Gi", keepLocalMaxSize, int64(20 << 30)},
		{ParamKeepLocalMaxSize, "0", keepLocalMaxSize, int64(0)},
		{ParamKeepLocalMaxSize, "-1Gi", keepLocalMaxSize, nil},
		{ParamKeepLocalMaxSize, "lots", keepLocalMaxSize, nil},
		{ParamDiskReserve, "10%", diskReserveOf100GiB, uint64(10 << 30)},
		{ParamDiskReserve, " 0.5% ", diskReserveOf100GiB, uint64(512 << 20)},
		{ParamDiskReserve, "0%", diskReserveOf100GiB, uint64(0)},
		{ParamDiskReserve, "50%", diskReserveOf100GiB, uint64(50 << 30)},
		{ParamDiskReserve, "20Gi", diskReserveOf100GiB, uint64(20 << 30)},
		{ParamDiskReserve, "0", diskReserveOf100GiB, uint64(0)},
		{ParamDiskReserve, "51%", diskReserveOf100GiB, nil},
		{ParamDiskReserve, "-1%", diskReserveOf100GiB, nil},
		{ParamDiskReserve, "NaN%", diskReserveOf100GiB, nil},
		{ParamDiskReserve, "%", diskReserveOf100GiB, nil},
		{ParamDiskReserve, "-1Gi", diskReserveOf100GiB, nil},
		{ParamDiskReserve, "a tenth", diskReserveOf100GiB, nil},
		{ParamMemoryRestoreBase, "", restoreBase, ""},
		{ParamMemoryRestoreBase, " registry.example.com/restore-base@" + dg + " ", restoreBase, "registry.example.com/restore-base@" + dg},
		{ParamMemoryRestoreBase, "localhost:5000/restore-base@" + dg, restoreBase, "localhost:5000/restore-base@" + dg},
		{ParamMemoryRestoreBase, "registry.example.com/restore-base:1", restoreBase, nil},
		{ParamMemoryRestoreBase, "restore-base@" + dg, restoreBase, nil},
		{ParamMemoryRestoreBase, "registry.example.com/restore-base@sha256:abc", restoreBase, nil},
		{ParamMemoryAnonymousPull, "", anonymousPull, false},
		{ParamMemoryAnonymousPull, "Refuse", anonymousPull, false},
		{ParamMemoryAnonymousPull, "Allow", anonymousPull, true},
		{ParamMemoryAnonymousPull, "allow", anonymousPull, nil},
	} {
		got, err := tc.parse(tc.value)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s %q = %v, want it refused", tc.param, tc.value, got)
		case tc.want != nil && err != nil:
			t.Errorf("%s %q refused: %v", tc.param, tc.value, err)
		case tc.want != nil && got != tc.want:
			t.Errorf("%s %q = %v, want %v", tc.param, tc.value, got, tc.want)
		}
	}
	if _, err := ParseMaxPause(DefaultMaxPause.String()); err != nil {
		t.Errorf("the default max-pause is refused: %v", err)
	}
	if _, err := ParseKeepLocalMaxSize(DefaultKeepLocalMaxSize); err != nil {
		t.Errorf("the default keep-local-max-size is refused: %v", err)
	}
	r, err := ParseDiskReserve(DefaultDiskReserve)
	if err != nil {
		t.Errorf("the default disk-reserve is refused: %v", err)
	}
	if got, want := (DiskReserve{}).Of(100<<30), r.Of(100<<30); got != want || (DiskReserve{}).String() != DefaultDiskReserve {
		t.Errorf("the zero DiskReserve keeps %d bytes of 100 GiB and reads %q, want %d and %q as the default", got, DiskReserve{}, want, DefaultDiskReserve)
	}
}

// diskReserveOf100GiB returns the bytes disk-reserve v keeps of 100 GiB.
func diskReserveOf100GiB(v string) (any, error) {
	r, err := ParseDiskReserve(v)
	return r.Of(100 << 30), err
}

func maxPause(v string) (any, error)         { return ParseMaxPause(v) }
func maxLayers(v string) (any, error)        { return ParseMaxLayers(v) }
func keepLocal(v string) (any, error)        { return ParseKeepLocal(v) }
func keepLocalMaxSize(v string) (any, error) { return ParseKeepLocalMaxSize(v) }
func restoreBase(v string) (any, error)      { return ParseMemoryRestoreBase(v) }
func anonymousPull(v string) (any, error)    { return ParseMemoryAnonymousPull(v) }
