// Compute mix: object building, string concatenation, a regex, a sort of 50,000 numbers and a 2 MB JSON round trip.
async () => {
  const objects = [];
  for (let i = 0; i < 100000; i++) objects.push({ id: i, name: 'item' + i, group: i % 17 });
  let text = '';
  for (let i = 0; i < 50000; i++) text += i.toString(36) + (i % 3 === 0 ? ' ' : '-');
  const words = text.match(/[a-z]+[0-9]*/g).length;
  const numbers = [];
  for (let i = 0; i < 50000; i++) numbers.push((i * 7919) % 50021);
  numbers.sort((a, b) => a - b);
  const value = objects.slice(0, 40000).map((o) => ({ id: o.id, name: o.name, score: o.id / 7 }));
  const json = JSON.stringify(value);
  const back = JSON.parse(json);
  return [objects.length, text.length, words, numbers[25000], json.length, back.length];
}
