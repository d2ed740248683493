package dest

import "math/bits"

// posSet is the positions of one data file's rows that later chunks replaced: a bit per row of the file, made
// when the first of them is replaced, so that the position deletes of a range take an eighth of a byte per
// row written rather than eight bytes per row replaced.
type posSet struct {
	words []uint64
	n     int64 // positions set
}

func newPosSet(rows int64) *posSet { return &posSet{words: make([]uint64, (rows+63)/64)} }

// add sets pos; a position set twice counts once.
func (p *posSet) add(pos int64) {
	w, b := pos/64, uint64(1)<<(pos%64)
	if p.words[w]&b == 0 {
		p.words[w] |= b
		p.n++
	}
}

// positions returns the positions set, ascending.
func (p *posSet) positions() []int64 {
	out := make([]int64, 0, p.n)
	for i, w := range p.words {
		for w != 0 {
			out = append(out, int64(i)*64+int64(bits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
	return out
}
