package pipeline

// Items is items, for tests that hand WAL frames to a destination as the apply loop does.
var Items = items

// TakeRange is takeRange, for the table test of range selection.
var TakeRange = takeRange

// ResolveApply is resolveApply, for the table test of plugin-proposed apply limits.
var ResolveApply = resolveApply
