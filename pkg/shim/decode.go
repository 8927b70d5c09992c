package shim

import "strings"

// decodeEntry reads entry from the runtime's stdin as json.Unmarshal
// reads it (keys matched regardless of case, a repeated key's last value
// kept, null leaving a field as it was; what Unmarshal refuses, refused),
// with the shim's own JSON reader (json.go). FuzzDecodeEntry holds it to
// Unmarshal.
func decodeEntry(stdin []byte) (entry, error) {
	e, err := decode(stdin)
	if err != nil {
		return entry{}, err
	}
	return e, nil
}

// decode reads stdin into an entry. A syntax error returns no entry; a
// value of the wrong type returns its error with the entry read on past
// it, as Unmarshal fills one (FuzzDecodeEntry holds the two equal).
func decode(stdin []byte) (entry, error) {
	var e entry
	r := &reader{b: stdin}
	_, err := r.object(func(key string) error {
		switch {
		case strings.EqualFold(key, "cniVersion"):
			return r.str(&e.CNIVersion)
		case strings.EqualFold(key, "pod_socket"):
			return r.str(&e.PodSocket)
		case strings.EqualFold(key, "cache_dir"):
			return r.str(&e.CacheDir)
		case strings.EqualFold(key, "iptables_backend"):
			return r.str(&e.IptablesBackend)
		case strings.EqualFold(key, "prevResult"):
			return readPrevResult(r, &e.PrevResult)
		}
		return r.skip()
	})
	if err == nil {
		err = r.end()
	}
	switch {
	case err != nil:
		return entry{}, err
	case r.typeErr != nil:
		return e, r.typeErr
	}
	return e, nil
}

// readPrevResult reads the primary's result into *p: null sets it nil, an
// object fills the one there (a repeated key's earlier fields stay, as
// Unmarshal keeps them); Unmarshal makes one before it reads the value,
// so a value of the wrong type leaves an empty one.
func readPrevResult(r *reader, p **prevResult) error {
	if null, err := r.null(); null {
		*p = nil
		return err
	}
	if *p == nil {
		*p = &prevResult{}
	}
	cur := *p
	_, err := r.object(func(key string) error {
		if !strings.EqualFold(key, "ips") {
			return r.skip()
		}
		return readIPs(r, &cur.IPs)
	})
	return err
}

// readIPs reads the result's ips: null sets none, an array its elements'
// addresses, decoded over what a repeated key left, as Unmarshal does.
func readIPs(r *reader, ips *[]prevIP) error {
	if null, err := r.null(); null {
		*ips = nil
		return err
	}
	list := (*ips)[:0]
	open, err := r.list(func() error {
		var ip prevIP
		if len(list) < cap(list) {
			ip = list[:len(list)+1][len(list)]
		}
		_, err := r.object(func(key string) error {
			if strings.EqualFold(key, "address") {
				return r.str(&ip.Address)
			}
			return r.skip()
		})
		list = append(list, ip)
		return err
	})
	if !open || err != nil {
		return err
	}
	if len(list) == 0 {
		list = []prevIP{} // Unmarshal's fresh empty list
	}
	*ips = list
	return nil
}
