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

// Package diskbudget checks what a snapshot will write per filesystem against
// the room above the kubelet's eviction line, less others' reservations.
package diskbudget

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// ErrNoRoom reports no disk room for a snapshot now.
var ErrNoRoom = errors.New("not enough disk space for the snapshot")

// Plan adds up, by filesystem, what a snapshot will write.
type Plan struct {
	// Reserve is what each filesystem keeps free: the nodes' eviction
	// threshold.
	Reserve task.DiskReserve

	byDev map[uint64]*fsUse
	devs  []uint64
}

type fsUse struct {
	dir   string
	what  []string
	bytes uint64
}

// Add counts n bytes written to dir for what; it fails if dir is missing.
func (p *Plan) Add(dir string, n uint64, what string) error {
	if dir == "" || n == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("not counting %s against the disk: %w", what, err)
	}
	if p.byDev == nil {
		p.byDev = map[uint64]*fsUse{}
	}
	f := p.byDev[st.Dev]
	if f == nil {
		f = &fsUse{dir: dir}
		p.byDev[st.Dev] = f
		p.devs = append(p.devs, st.Dev)
	}
	f.bytes += n
	f.what = append(f.what, what+" "+Size(n))
	return nil
}

// Check fails with ErrNoRoom where p does not fit beside others, by device.
func (p *Plan) Check(others map[uint64]uint64) error {
	var errs []error
	for _, dev := range p.devs {
		f := p.byDev[dev]
		var fs unix.Statfs_t
		if err := unix.Statfs(f.dir, &fs); err != nil {
			errs = append(errs, err)
			continue
		}
		where := f.dir + " (" + strings.Join(f.what, ", ") + ")"
		free, total := fs.Bavail*uint64(fs.Bsize), fs.Blocks*uint64(fs.Bsize)
		if err := Room(where, f.bytes, free, total, others[dev], p.Reserve); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Room fails with ErrNoRoom when writing need bytes to where would leave less
// than reserve of total free, reserved of free being promised to others.
func Room(where string, need, free, total, reserved uint64, reserve task.DiskReserve) error {
	keep := reserve.Of(total)
	if free >= keep+reserved && free-keep-reserved >= need {
		return nil
	}
	others := ""
	if reserved > 0 {
		others = fmt.Sprintf(", of which other snapshots running on the node have reserved %s,", Size(reserved))
	}
	return fmt.Errorf("%w: the snapshot writes about %s to %s, whose filesystem has %s free of %s%s and must keep %s free (%s %s, the nodes' eviction threshold)",
		ErrNoRoom, Size(need), where, Size(free), Size(total), others, Size(keep), task.ParamDiskReserve, reserve)
}

// Size formats n bytes in MiB, or KiB below one MiB.
func Size(n uint64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
