//! A binary heap laid out exactly as `java.util.PriorityQueue` lays out its array.
//!
//! Flink's CEP keeps partial and completed matches in `PriorityQueue`s ordered by their
//! first row only, iterates them in array order and takes the root first. Matches with
//! equal keys (one start row, several ends) therefore come out in an order that follows
//! the heap's sift rules, and with `AFTER MATCH SKIP` the first one out prunes the others.
//! Keeping the same array, operation for operation, gives the same survivors.

/// Adds `x` (Java's `offer`: sift up while smaller than the parent).
pub fn offer<T, K: Ord>(heap: &mut Vec<T>, x: T, key: impl Fn(&T) -> K) {
    heap.push(x);
    let mut k = heap.len() - 1;
    while k > 0 {
        let parent = (k - 1) / 2;
        if key(&heap[k]) >= key(&heap[parent]) {
            break;
        }
        heap.swap(k, parent);
        k = parent;
    }
}

/// Takes the root (Java's `poll`: the last element sifts down from the root).
pub fn poll<T, K: Ord>(heap: &mut Vec<T>, key: impl Fn(&T) -> K) -> Option<T> {
    if heap.is_empty() {
        return None;
    }
    let root = heap.swap_remove(0);
    if !heap.is_empty() {
        sift_down(heap, 0, &key);
    }
    Some(root)
}

/// Removes the elements `remove` picks (Java's `removeIf`/`removeAll`: survivors keep
/// their order, then the array is heapified).
pub fn remove_if<T, K: Ord>(heap: &mut Vec<T>, remove: impl Fn(&T) -> bool, key: impl Fn(&T) -> K) {
    let before = heap.len();
    heap.retain(|x| !remove(x));
    if heap.len() == before {
        return;
    }
    for i in (0..heap.len() / 2).rev() {
        sift_down(heap, i, &key);
    }
}

/// Java's `siftDown`: move the element at `k` down while a child is smaller, taking the
/// right child only when it is strictly smaller than the left.
fn sift_down<T, K: Ord>(heap: &mut [T], mut k: usize, key: &impl Fn(&T) -> K) {
    let n = heap.len();
    while k < n / 2 {
        let mut child = 2 * k + 1;
        let right = child + 1;
        if right < n && key(&heap[child]) > key(&heap[right]) {
            child = right;
        }
        if key(&heap[k]) <= key(&heap[child]) {
            break;
        }
        heap.swap(k, child);
        k = child;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal keys come out as Java's PriorityQueue gives them (traced by hand from
    /// OpenJDK's siftUp/siftDown): [(5,'a'), (6,'b')] then offers of 4, 5, 6.
    #[test]
    fn equal_keys_follow_javas_layout() {
        let key = |x: &(u32, char)| x.0;
        let mut h = Vec::new();
        for x in [(5, 'a'), (6, 'b'), (4, 'c'), (5, 'd'), (6, 'e')] {
            offer(&mut h, x, key);
        }
        assert_eq!(h, vec![(4, 'c'), (5, 'd'), (5, 'a'), (6, 'b'), (6, 'e')]);
        assert_eq!(poll(&mut h, key), Some((4, 'c')));
        // 6e moves to the root and sinks past the left child (5d; 5a is not smaller).
        assert_eq!(h, vec![(5, 'd'), (6, 'e'), (5, 'a'), (6, 'b')]);
        remove_if(&mut h, |x| x.1 == 'd', key);
        assert_eq!(h, vec![(5, 'a'), (6, 'e'), (6, 'b')]);
    }
}
