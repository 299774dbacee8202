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

package committer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// When the node's overlayfs snapshots are visible to the commit step (the
// Task mounts them read-only), the overlay differ copies a container's upper
// directory inside the pause instead of asking containerd to tar it: the
// copy is an in-kernel file copy (copy_file_range) plus one lstat per entry,
// where containerd's tar goes through its content store, which hashes every
// byte and syncs it to disk. The tar is written from the copy after the
// thaw, with the headers containerd's tar writer gives the same entries.

// stageCopiers is the number of files copied at once inside the pause.
const stageCopiers = 4

// stagedUpper is an upper directory captured inside the pause: every
// entry's tar header, and a copy of every regular file's content.
type stagedUpper struct {
	dir     string
	entries []stagedEntry
}

// stagedEntry is one entry of a staged upper directory.
type stagedEntry struct {
	hdr *tar.Header
	// copy names the entry's content in the staging directory, if any.
	copy string
}

// noNames gives tar.FileInfoHeader empty user and group names, as
// containerd's tar writer does, instead of looking them up on this host.
type noNames struct{ fs.FileInfo }

// Uname implements tar.FileInfoNames.
func (noNames) Uname() (string, error) { return "", nil }

// Gname implements tar.FileInfoNames.
func (noNames) Gname() (string, error) { return "", nil }

// stageUpper copies the upper directory upper into dir, which must exist and
// be empty, and records the tar header of every entry. Sockets are left out,
// as containerd's tar writer leaves them out.
func stageUpper(ctx context.Context, upper, dir string) (*stagedUpper, error) {
	s := &stagedUpper{dir: dir}
	type job struct {
		src, dst string
		size     int64
	}
	var jobs []job
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(noNames{fi}, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Format = tar.FormatPAX
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !fi.IsDir() && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				s.entries = append(s.entries, stagedEntry{hdr: hdr})
				return nil
			}
			links[key] = hdr.Name
		}
		capability, err := lgetxattr(p, "security.capability")
		if err != nil {
			return err
		}
		if len(capability) > 0 {
			hdr.PAXRecords = map[string]string{paxXattr + "security.capability": string(capability)}
		}
		e := stagedEntry{hdr: hdr}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			e.copy = strconv.Itoa(len(jobs))
			jobs = append(jobs, job{src: p, dst: filepath.Join(dir, e.copy), size: hdr.Size})
		}
		s.entries = append(s.entries, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading upper directory %s: %w", upper, err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan job)
	)
	for range min(stageCopiers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				if err := copyFile(j.src, j.dst, j.size); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		next <- j
	}
	close(next)
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, fmt.Errorf("copying upper directory %s: %w", upper, err)
	}
	return s, nil
}

// paxXattr is the PAX record prefix of extended attributes.
const paxXattr = "SCHILY.xattr."

// lgetxattr reads an extended attribute of a path (not following a
// symlink); nil when the attribute or xattr support is missing.
func lgetxattr(p, attr string) ([]byte, error) {
	buf := make([]byte, 128)
	for {
		n, err := unix.Lgetxattr(p, attr, buf)
		switch {
		case errors.Is(err, unix.ERANGE):
			buf = make([]byte, len(buf)*4)
			continue
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading %s of %s: %w", attr, p, err)
		}
		return buf[:n], nil
	}
}

// copyFile copies size bytes of src to a new file dst, in the kernel where
// the file systems allow it.
func copyFile(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("%s: copied %d bytes, want %d", src, n, size)
	}
	return err
}

// dirs lists the directories of the staged upper directory, cleaned.
func (s *stagedUpper) dirs() []string {
	var out []string
	for _, e := range s.entries {
		if e.hdr.Typeflag == tar.TypeDir {
			out = append(out, cleanTarName(e.hdr.Name))
		}
	}
	return out
}

// writeTar writes the staged upper directory as a tar, whiteouts still as
// character devices (see convertUpperTar).
func (s *stagedUpper) writeTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, e := range s.entries {
		if err := tw.WriteHeader(e.hdr); err != nil {
			return err
		}
		if e.copy == "" {
			continue
		}
		if err := copyStaged(tw, filepath.Join(s.dir, e.copy), e.hdr.Size); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyStaged writes a staged copy of size bytes to w.
func copyStaged(w io.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err == nil && n != size {
		err = fmt.Errorf("staged copy %s holds %d bytes, want %d", p, n, size)
	}
	return err
}
