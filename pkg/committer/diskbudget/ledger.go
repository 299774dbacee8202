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

package diskbudget

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const lockFile = ".lock"

// Ledger records running snapshots' reservations in a directory shared on the
// node, one file per run: <owner>_<run>, owner its Task pod's UID.
type Ledger struct {
	// Dir is the ledger's directory; Reserve makes it, 0700, where missing.
	Dir string
	// Runs tells whether Task pod owner still runs; reservations of one
	// that does not are dropped, kept if it cannot tell.
	Runs func(owner string) (bool, error)
	// Logf, when set, is told of each reservation dropped or kept in doubt.
	Logf func(format string, a ...any)
}

// Reserve, under the ledger's lock, checks p against others' reservations and
// records it as owner's run's, replacing any earlier one.
func (l Ledger) Reserve(owner, run string, p *Plan) error {
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("disk ledger: %w", err)
	}
	unlock, err := l.lock()
	if err != nil {
		return err
	}
	defer unlock()
	others, err := l.reserved(reservationName(owner, run))
	if err != nil {
		return err
	}
	if err := p.Check(others); err != nil {
		return err
	}
	mine := map[string]uint64{}
	for _, dev := range p.devs {
		mine[strconv.FormatUint(dev, 10)] = p.byDev[dev].bytes
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return err
	}
	path := filepath.Join(l.Dir, reservationName(owner, run))
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("disk ledger: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("disk ledger: %w", err)
	}
	return nil
}

// Release removes the reservation of owner's run, if any.
func (l Ledger) Release(owner, run string) error {
	err := os.Remove(filepath.Join(l.Dir, reservationName(owner, run)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// reservationName joins owner and run by '_', which is in no UID or run ID.
func reservationName(owner, run string) string {
	return owner + "_" + run
}

func (l Ledger) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(l.Dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk ledger: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("disk ledger: locking %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// reserved sums by device the reservations of running Task pods but self.
func (l Ledger) reserved(self string) (map[uint64]uint64, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("disk ledger: %w", err)
	}
	total := map[uint64]uint64{}
	for _, e := range entries {
		name := e.Name()
		owner, _, ok := strings.Cut(name, "_")
		if name == self || !ok || !e.Type().IsRegular() || strings.HasSuffix(name, ".tmp") {
			continue
		}
		path := filepath.Join(l.Dir, name)
		running, err := l.Runs(owner)
		switch {
		case err != nil:
			l.logf("disk ledger: keeping reservation %s: %v", name, err)
		case !running:
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				l.logf("disk ledger: removing reservation %s of a run that is over: %v", name, err)
			}
			continue
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("disk ledger: %w", err)
		}
		var r map[string]uint64
		if err := json.Unmarshal(b, &r); err != nil {
			l.logf("disk ledger: ignoring reservation %s: %v", name, err)
			continue
		}
		for dev, n := range r {
			d, err := strconv.ParseUint(dev, 10, 64)
			if err != nil {
				continue
			}
			total[d] += n
		}
	}
	return total, nil
}

func (l Ledger) logf(format string, a ...any) {
	if l.Logf != nil {
		l.Logf(format, a...)
	}
}
