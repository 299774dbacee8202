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

// Package manifests prepares the YAML the local control plane applies:
// Tekton's CRDs without their webhook conversion, and the project's config/
// without what a control plane without nodes cannot run. It also reads
// config/'s objects, which the Helm chart is checked against (test/chart).
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// TektonCRDs returns the CRDs in dir (Tekton's config/300-crds) with
// spec.conversion set to strategy None. With no Tekton webhook to convert
// between v1beta1 and v1, the API server would fail every request needing
// conversion, reads of v1 included; without it v1, the storage version,
// works fully and v1beta1 objects are served with only apiVersion changed.
func TektonCRDs(dir string) ([]byte, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	var out bytes.Buffer
	for _, f := range files {
		docs, err := documents(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			var crd map[string]any
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			spec, ok := crd["spec"].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: a document without spec", f)
			}
			spec["conversion"] = map[string]any{"strategy": "None"}
			b, err := yaml.Marshal(crd)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&out, "---\n%s", b)
		}
	}
	return out.Bytes(), nil
}

// Config returns the YAML documents of the files under root/config but
// config/samples and kustomization files, without Deployments and
// CustomResourceDefinitions: the local control plane runs the controller as
// a process, and installs the CRDs itself.
func Config(root string) ([]byte, error) {
	docs, err := ConfigDocuments(root)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, doc := range docs {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		switch meta.Kind {
		case "Deployment", "CustomResourceDefinition":
			continue
		}
		fmt.Fprintf(&out, "---\n%s\n", bytes.TrimRight(doc, "\n"))
	}
	return out.Bytes(), nil
}

// ConfigDocuments returns every object's YAML document in the files under
// root/config but config/samples and kustomization files, in file order;
// documents without a kind (comments only) are left out.
func ConfigDocuments(root string) ([][]byte, error) {
	dir := filepath.Join(root, "config")
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path == filepath.Join(dir, "samples"):
			return filepath.SkipDir
		case d.IsDir(), strings.HasPrefix(d.Name(), "kustomization."):
			return nil
		case strings.HasSuffix(path, ".yaml"), strings.HasSuffix(path, ".yml"):
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out [][]byte
	for _, f := range files {
		docs, err := documents(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range docs {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if meta.Kind != "" {
				out = append(out, doc)
			}
		}
	}
	return out, nil
}

// documents splits a YAML file into its documents.
func documents(file string) ([][]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	docs, err := Split(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return docs, nil
}

// Split returns the documents of multi-document YAML, blank ones left out.
func Split(b []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}
