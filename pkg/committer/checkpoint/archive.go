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
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// staleCheckpointAge is when an archive naming no Task pod is a killed run's.
const staleCheckpointAge = time.Hour

// ArchiveName names container's archive of run, prefixed when set by
// taskPodUID and '_', which no UID, run ID or container name contains.
func ArchiveName(taskPodUID, run, container string) string {
	if taskPodUID == "" {
		return run + "-" + container
	}
	return taskPodUID + "_" + run + "-" + container
}

// archiveOwner returns the Task pod UID an archive name starts with, or "".
func archiveOwner(name string) string {
	owner, _, ok := strings.Cut(name, "_")
	if !ok || task.ValidateID(task.FlagTaskPodUID, owner) != nil {
		return ""
	}
	return owner
}

// Sweep removes the archives in dir whose run is over, asking runs.
func Sweep(dir string, runs func(taskPodUID string) (bool, error), logger *log.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logger.Printf("checkpoint-dir %s: not sweeping it: %v", dir, err)
		}
		return
	}
	for _, e := range entries {
		// Old versions left .tar files; the disk ledger is a dot dir.
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

// Restrict makes the archive in dir root-only, whatever CRIU or runc wrote.
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

// minZstdSaving is the sampled saving below which zstd is not worth its CPU.
const minZstdSaving = 0.10

const (
	sampleWindows = 64
	sampleWindow  = 64 << 10
)

// LayerType returns the media type for the archive in dir, zstd only if a
// sample saves minZstdSaving (memory often does not), and its files' size.
func LayerType(dir string) (string, int64, error) {
	saving, size, err := zstdSaving(dir)
	if err != nil {
		return "", 0, err
	}
	if saving < minZstdSaving {
		return ocispec.MediaTypeImageLayer, size, nil
	}
	return ocispec.MediaTypeImageLayerZstd, size, nil
}

// zstdSaving returns the fraction fastest zstd saves on sampleWindows windows
// of sampleWindow bytes, spread evenly over dir's files, and their size.
func zstdSaving(dir string) (float64, int64, error) {
	type file struct {
		path string
		size int64
	}
	var files []file
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, file{p, fi.Size()})
		total += fi.Size()
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return 0, 0, err
	}
	defer enc.Close()
	buf := make([]byte, sampleWindow)
	var sampled, compressed int64
	i, start := 0, int64(0)
	at := func() int64 { return int64(i) * total / sampleWindows }
	for _, fl := range files {
		if i < sampleWindows && at() < start+fl.size {
			f, err := os.Open(fl.path)
			if err != nil {
				return 0, 0, err
			}
			for ; i < sampleWindows && at() < start+fl.size; i++ {
				n, err := f.ReadAt(buf, at()-start)
				if err != nil && !errors.Is(err, io.EOF) {
					f.Close()
					return 0, 0, err
				}
				sampled += int64(n)
				compressed += int64(len(enc.EncodeAll(buf[:n], nil)))
			}
			f.Close()
		}
		start += fl.size
	}
	if sampled == 0 {
		return 0, total, nil
	}
	return float64(sampled-compressed) / float64(sampled), total, nil
}

// tarDir tars dir's regular files and directories to w, owned by root.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(tw, f, make([]byte, 1<<20))
		return err
	})
	return errors.Join(err, tw.Close())
}

// ArchiveLayer returns the descriptor of the layer of the archive in dir.
func ArchiveLayer(dir, mediaType string) (ocispec.Descriptor, error) {
	layer, _, _, err := oci.WriteLayer(io.Discard, func(w io.Writer) error { return tarDir(dir, w) }, mediaType)
	return layer, err
}

// WriteArchiveLayer writes the layer of the archive in dir to w and returns
// the tar's digest (if compressed) and size; w's reader digests the layer.
func WriteArchiveLayer(w io.Writer, dir, mediaType string) (digest.Digest, int64, error) {
	bw := bufio.NewWriterSize(w, 1<<20)
	cnt := &oci.CountingWriter{}
	if mediaType == ocispec.MediaTypeImageLayer {
		if err := tarDir(dir, io.MultiWriter(bw, cnt)); err != nil {
			return "", 0, err
		}
		return "", cnt.N, bw.Flush()
	}
	zw, err := oci.Compressor(bw, mediaType)
	if err != nil {
		return "", 0, err
	}
	dg := digest.Canonical.Digester()
	err = tarDir(dir, io.MultiWriter(zw, dg.Hash(), cnt))
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, err
	}
	return dg.Digest(), cnt.N, bw.Flush()
}
