package pipeline

// Items is items, for tests that hand WAL frames to a destination as the apply loop does.
var Items = items
