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

package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// staleCheckpointAge is the age past which an archive that names no Task
// pod (one of an earlier version, or of a run outside a pod) is taken for
// one a killed run left: a run reads its own within minutes.
const staleCheckpointAge = time.Hour

// ArchiveName is the name, in CheckpointDir, of the archive of container's
// memory snapshot in run, written in the Task pod taskPodUID (none when
// empty). '_' is in no UID, run ID or container name.
func ArchiveName(taskPodUID, run, container string) string {
	if taskPodUID == "" {
		return run + "-" + container
	}
	return taskPodUID + "_" + run + "-" + container
}

// archiveOwner returns the UID of the Task pod that owns the archive named
// name, or "" when its name carries none.
func archiveOwner(name string) string {
	owner, _, ok := strings.Cut(name, "_")
	if !ok || task.ValidateID(task.FlagTaskPodUID, owner) != nil {
		return ""
	}
	return owner
}

// Sweep removes the archives in dir of runs that are over, asking
// runs whether a Task pod still runs.
func Sweep(dir string, runs func(taskPodUID string) (bool, error), logger *log.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logger.Printf("checkpoint-dir %s: not sweeping it: %v", dir, err)
		}
		return
	}
	for _, e := range entries {
		// Earlier versions left archives as .tar files; the disk ledger is
		// a dot directory.
		if !e.IsDir() && filepath.Ext(e.Name()) != ".tar" || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		var why string
		if owner := archiveOwner(e.Name()); owner != "" {
			running, err := runs(owner)
			if err != nil {
				logger.Printf("keeping checkpoint %s: %v", p, err)
				continue
			}
			if running {
				continue
			}
			why = "the run of Task pod " + owner + " is over"
		} else {
			st, err := os.Lstat(p)
			if err != nil || time.Since(st.ModTime()) <= staleCheckpointAge {
				continue
			}
			why = fmt.Sprintf("it names no Task pod and was last written %s ago", time.Since(st.ModTime()).Round(time.Minute))
		}
		if err := os.RemoveAll(p); err != nil {
			logger.Printf("removing checkpoint %s (%s): %v", p, why, err)
			continue
		}
		logger.Printf("removed checkpoint %s: %s", p, why)
	}
}

// Restrict leaves the archive in dir readable by root only: its
// directories 0700 and its files 0600, whatever CRIU or runc wrote them as.
func Restrict(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			err = os.Chmod(p, 0o700)
		case d.Type().IsRegular():
			err = os.Chmod(p, 0o600)
		}
		return err
	})
}
