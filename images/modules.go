package images

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Module is a kernel module file.
type Module struct {
	Name    string // as the kernel knows it (underscores)
	Path    string // on disk
	Depends []string
}

// modName normalises a module name: the kernel treats - and _ alike.
func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// ScanModules indexes every .ko under dir by name, with its dependencies
// read from the ELF .modinfo section.
func ScanModules(dir string) (map[string]Module, error) {
	mods := map[string]Module{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".ko") {
			return err
		}
		name := modName(strings.TrimSuffix(filepath.Base(path), ".ko"))
		deps, err := moduleDepends(path)
		if err != nil {
			return fmt.Errorf("module %s: %w", path, err)
		}
		mods[name] = Module{Name: name, Path: path, Depends: deps}
		return nil
	})
	return mods, err
}

func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				deps = append(deps, modName(d))
			}
			return deps, nil
		}
	}
	return nil, nil
}

// LoadOrder returns the modules named (and their dependencies) in an order
// where every module follows its dependencies. A name that is not among
// the modules is an error unless the kernel has it built in (builtin).
func LoadOrder(mods map[string]Module, builtin map[string]bool, want []string) ([]Module, error) {
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		name = modName(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		m, ok := mods[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s (needed by %s) not found", name, from)
		}
		state[name] = 1
		for _, d := range m.Depends {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, m)
		return nil
	}
	for _, w := range want {
		if err := visit(w, "the image"); err != nil {
			return nil, err
		}
	}
	return order, nil
}
