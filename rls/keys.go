package rls

import (
	"fmt"
)

// override returns the limit of a request's own limit (the descriptor's
// "limit" field): a fixed window, with a limiter kept per (rate, window).
func (s *Service) override(domain string, rpu uint32, unit string, mult uint32, ents []entry) (*limit, error) {
	r := RateLimit{RequestsPerUnit: rpu, Unit: unit, UnitMultiplier: mult}
	w, err := r.Window()
	if err != nil {
		return nil, fmt.Errorf("the descriptor's limit: %w", err)
	}
	lm := &limit{statsKey: s.metricKey(domain, ents, nil, true)}
	k := overrideKey{rpu, w}
	s.ovMu.Lock()
	l, ok := s.overrides[k]
	s.ovMu.Unlock()
	if !ok {
		name := fmt.Sprintf("rls-override:%d/%s", rpu, w)
		l = &lim{policy: name, header: name, window: w, fixed: true, limit: int64(rpu), pb: currentLimit(rpu, w, "", mult)}
		pol, err := r.policy(name)
		if err != nil {
			return nil, fmt.Errorf("the descriptor's limit: %w", err)
		}
		if pol.Name == "" {
			l.blocked = true
		} else if l.l, err = pol.Limiter(s.store); err != nil {
			return nil, err
		}
		s.ovMu.Lock()
		if len(s.overrides) < maxOverrides {
			s.overrides[k] = l
		}
		s.ovMu.Unlock()
	}
	lm.lims = []lim{*l}
	return lm, nil
}

// keys returns the store key and the metric key of a descriptor whose
// entries matched the nodes of path, as the reference makes them: the
// store key holds every entry's value (a share_threshold wildcard's
// pattern instead, a credential's keyed hash); the metric key is the
// limit's config path, or the request's values for detailed_metric, or the
// config path with the values of value_to_metric levels.
func (s *Service) keys(domain string, ents []entry, path []*node, lm *limit) (key, stats string) {
	key = s.storeKey(domain, ents, path)
	vtm := false
	for i := range ents {
		if n := path[i]; n != nil && (n.vtm || n.share != "") {
			vtm = true
		}
	}
	switch {
	case lm.detailed:
		stats = s.metricKey(domain, ents, path, true)
	case vtm:
		stats = s.metricKey(domain, ents, path, false)
	default:
		stats = lm.statsKey
	}
	return key, stats
}

// storeKey is the key of a descriptor in the store: the domain and every
// entry, each part escaped so that no two descriptors share one.
func (s *Service) storeKey(domain string, ents []entry, path []*node) string {
	n := len(domain) + 8
	for _, e := range ents {
		n += len(e.key) + len(e.value) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, domain...)
	for i, e := range ents {
		b = append(b, '|')
		b = appendEscaped(b, e.key)
		b = append(b, '=')
		nd := nodeAt(path, i)
		switch {
		case nd != nil && nd.share != "":
			b = append(b, '*')
			b = appendEscaped(b, nd.share)
		case nd != nil && nd.cred:
			b = s.appendHash(b, e.value)
		default:
			b = appendEscaped(b, e.value)
		}
	}
	return string(b)
}

// nodeAt is the node entry i matched, nil past the path.
func nodeAt(path []*node, i int) *node {
	if i < len(path) {
		return path[i]
	}
	return nil
}

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '|' || c == '=' || c == '\\' || c == '#' || c == '*' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}

// appendHash appends what stands for a credential's value v: '#' and
// 128 bits of HMAC-SHA256(secret, v) in unpadded base64url (credkey).
func (s *Service) appendHash(b []byte, v string) []byte {
	return append(b, s.hash.Key(v)...)
}

// metricKey is the reference's metric key of a request: the domain, then
// per entry key_value (detailed, or a value_to_metric level), the
// wildcard pattern (a share_threshold level, or a wildcard level without
// value_to_metric), or what the config names the level; a credential's
// value as its keyed hash.
func (s *Service) metricKey(domain string, ents []entry, path []*node, detailed bool) string {
	b := []byte(domain)
	for i, e := range ents {
		b = append(b, '.')
		nd := nodeAt(path, i)
		switch {
		case nd != nil && nd.share != "":
			b = append(b, e.key...)
			b = append(b, '_')
			b = append(b, nd.share...)
		case detailed || nd == nil || nd.vtm:
			b = append(b, e.key...)
			if e.value != "" {
				b = append(b, '_')
				if nd != nil && nd.cred {
					b = s.appendHash(b, e.value)
				} else {
					b = append(b, e.value...)
				}
			}
		default:
			b = append(b, nd.kv...)
		}
	}
	return string(b)
}

// decide runs the checks of ds and writes the response. lead is the check
