// JSON: a value of about 2 MB built, stringified and parsed back.
async () => {
  const value = [];
  for (let i = 0; i < 25000; i++) value.push({ id: i, name: 'item ' + i, score: i / 7, tags: ['x', 'y'], ok: i % 2 === 0 });
  const text = JSON.stringify(value);
  const back = JSON.parse(text);
  return [text.length, back.length];
}
